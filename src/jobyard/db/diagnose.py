"""Turn "cannot connect" into one line that names host:port/database and the fix.

Used by every command and by the SDK before their first real connection: a bad URL becomes a
`ConfigurationError`, a server that cannot be used a `DatabaseUnavailable` (`transient=True`
when waiting may help: refused, timed out, starting up).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final
from urllib.parse import unquote, urlsplit

import psycopg
from psycopg.conninfo import conninfo_to_dict

from jobyard.domain.errors import ConfigurationError, DatabaseUnavailable

PROBE_TIMEOUT_S: Final = 5
_SCHEMES: Final = ("postgresql", "postgres")
URL_SHAPE: Final = "postgresql://user:password@host:5432/database"
# The password of a URL urlsplit cannot parse: "scheme://user:" up to the last "@".
_URL_PASSWORD: Final = re.compile(r"(://[^:/@]*:)[^/]*@")


class ConnectFailed(DatabaseUnavailable, psycopg.OperationalError):
    """A connection attempt failed; the message names the server and the fix.

    Also a psycopg OperationalError, so code that retries on connection errors (the worker's
    reconnect loops) keeps treating it as one, while SDK users catch `DatabaseUnavailable`.
    """


@dataclass(frozen=True)
class Target:
    """What a URL points at, for messages (never the password)."""

    host: str
    port: str
    database: str
    user: str
    socket_dir: str | None

    def __str__(self) -> str:
        if self.socket_dir is not None:
            return f"socket {self.socket_dir}/.s.PGSQL.{self.port} database {self.database}"
        return f"{self.host}:{self.port}/{self.database}"


def target(url: str, source: str = "JOBYARD_DATABASE_URL") -> Target:
    """Parse `url` (a postgresql:// URL or a libpq key=value string) or say what is wrong."""
    shown = _hide_password(url)
    if "://" in url:
        try:
            scheme = urlsplit(url).scheme
        except ValueError as exc:  # e.g. "Invalid IPv6 URL": an unclosed [ in the host
            raise ConfigurationError(
                f"{source} is not a valid URL ({exc}): {shown!r}; use {URL_SHAPE} "
                "(an IPv6 host in brackets: postgresql://user@[::1]:5432/database)",
                field="database_url",
            ) from None
        if scheme not in _SCHEMES:
            raise ConfigurationError(
                f"{source} is not a PostgreSQL URL: {shown!r}; use {URL_SHAPE}",
                field="database_url",
            )
    try:
        params = conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        # A URL's scheme was checked above: libpq's words name the part it refused (an
        # unknown query parameter, say).
        what = (
            f"a usable PostgreSQL URL ({str(exc).strip()})" if "://" in url else "a PostgreSQL URL"
        )
        raise ConfigurationError(
            f"{source} is not {what}: {shown!r}; use {URL_SHAPE}", field="database_url"
        ) from None
    host = str(params.get("host") or "localhost")
    port = str(params.get("port") or "5432")
    user = str(params.get("user") or "")
    database = str(params.get("dbname") or user or "postgres")
    # libpq takes several hosts (tried in turn), each with its port: host1:5432,host2:5433.
    for one in port.split(","):
        if not one.isdigit() or not 0 < int(one) < 65536:
            raise ConfigurationError(
                f"{source} has an invalid port {one!r} (1-65535): {shown!r}", field="database_url"
            )
    socket_dir = host if host.startswith("/") else None
    return Target(host, port, database, user, socket_dir)


def probe(
    url: str, source: str = "JOBYARD_DATABASE_URL", *, timeout_s: int = PROBE_TIMEOUT_S
) -> None:
    """Connect once and close; raise the clear error for whatever went wrong."""
    where = target(url, source)
    try:
        conn = psycopg.connect(url, connect_timeout=timeout_s, autocommit=True)
    except psycopg.Error as exc:
        raise explain(exc, where, source) from None
    conn.close()


def explain(
    exc: BaseException, where: Target, source: str = "JOBYARD_DATABASE_URL"
) -> DatabaseUnavailable:
    """The domain error for a failed connection attempt to `where`."""
    text = str(exc)
    lowered = text.lower()
    fix_url = f"fix {source}"
    if "does not exist" in lowered and "database" in lowered:
        return ConnectFailed(
            f'database "{where.database}" does not exist on {_server(where)}: create it '
            f"(createdb {_createdb_flags(where)}{where.database}) or {fix_url}",
            target=str(where),
            reason="database_missing",
        )
    if "password authentication failed" in lowered or (
        "role" in lowered and "does not exist" in lowered
    ):
        why = "no such user" if "does not exist" in lowered else "wrong password"
        return ConnectFailed(
            f"authentication failed for user {where.user or '(default)'!r} at {where} ({why}): "
            f"check the user and password in {source}",
            target=str(where),
            reason="auth_failed",
        )
    if "no password supplied" in lowered or "authentication" in lowered:
        return ConnectFailed(
            f"{where} asks for a password: put it in {source} ({URL_SHAPE})",
            target=str(where),
            reason="auth_failed",
        )
    if "failed to resolve host" in lowered or "could not translate host name" in lowered:
        return ConnectFailed(
            f"cannot resolve host {where.host!r} ({where}): check the host in {source}",
            target=str(where),
            reason="unknown_host",
        )
    if "connection refused" in lowered or "no such file or directory" in lowered:
        return ConnectFailed(
            f"nothing accepts connections at {where}: start PostgreSQL there or {fix_url} "
            "(wrong host or port?)",
            target=str(where),
            reason="refused",
            transient=True,
        )
    if "timeout" in lowered or "timed out" in lowered:
        return ConnectFailed(
            f"no answer from {where}: is the host reachable and the port open? ({fix_url})",
            target=str(where),
            reason="timeout",
            transient=True,
        )
    if "starting up" in lowered or "shutting down" in lowered or "recovery" in lowered:
        return ConnectFailed(
            f"PostgreSQL at {where} is starting or stopping; try again in a moment",
            target=str(where),
            reason="starting",
            transient=True,
        )
    if "ssl negotiation" in lowered or "closed the connection unexpectedly" in lowered:
        return ConnectFailed(
            f"something answers at {where} but it is not PostgreSQL: check the port in {source}",
            target=str(where),
            reason="not_postgres",
        )
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return ConnectFailed(
        f"cannot connect to {where}: {first.removeprefix('connection failed: ')} ({fix_url})",
        target=str(where),
        reason="other",
    )


def _server(where: Target) -> str:
    return f"socket {where.socket_dir}" if where.socket_dir else f"{where.host}:{where.port}"


def _createdb_flags(where: Target) -> str:
    user = f"-U {where.user} " if where.user else ""
    return f"-h {where.host} -p {where.port} {user}"


def _hide_password(url: str) -> str:
    if "://" not in url:
        return url if "password" not in url else "<key=value string with a password>"
    try:
        password = urlsplit(url).password
    except ValueError:  # not parseable as a URL: hide whatever sits between "user:" and "@"
        return _URL_PASSWORD.sub(r"\1***@", url)
    if password is None:
        return url
    return url.replace(":" + password + "@", ":***@", 1).replace(
        ":" + unquote(password) + "@", ":***@", 1
    )


def is_transient(exc: DatabaseUnavailable) -> bool:
    return bool(exc.details.get("transient"))
