"""All configuration in one pydantic-settings class, read from JOBYARD_* variables.

Built once by the CLI or an app factory and passed down; never a module global.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, Field, SecretStr, model_validator
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from jobyard.domain.errors import ConfigurationError


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="JOBYARD_", extra="ignore", frozen=True)

    env: Literal["dev", "test", "prod"] = "dev"
    database_url: str | None = Field(
        default=None, validation_alias=AliasChoices("JOBYARD_DATABASE_URL", "DATABASE_URL")
    )
    # Unset: the project's .jobyard/ directory, found upward from the current one (db/locate.py).
    data_dir: Path | None = None
    # Unset: the API generates one on first start and keeps it in the data directory
    # (api/secret.py); `prod` refuses to start without it.
    secret_key: SecretStr | None = None
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["json", "console"] = "json"

    pool_min_size: int = Field(default=1, ge=1, le=100)
    pool_max_size: int = Field(default=10, ge=1, le=200)

    # GET /metrics needs `Authorization: Bearer <metrics_token>`; with no token it is refused
    # to everyone unless metrics_public opens it (it names every tenant's orgs and queues).
    metrics_token: SecretStr | None = None
    metrics_public: bool = False

    # Comma-separated proxy addresses (or "*") whose X-Forwarded-For/-Proto the API believes;
    # unset, proxy headers are ignored and the client IP is the socket peer.
    forwarded_allow_ips: str | None = None

    # Where users reach the dashboard (invitation links); default http://api_host:api_port.
    public_url: str | None = Field(default=None, pattern=r"^https?://[^\s/?#]+(/[^\s?#]*)?$")
    # How invitation links reach invitees: "log" (a log line) or an async "package.module:function".
    invitation_delivery: str = Field(default="log", pattern=r"^(log|[\w.]+:\w+)$")

    api_host: str = "127.0.0.1"
    api_port: int = Field(default=8000, ge=1, le=65535)

    # The project a worker, `jobyard enqueue` or an SDK App works in ("org/project" or an id).
    project: str = "demo/default"

    # Worker: heartbeat every 5 s, each extending the lease to 30 s (engine rule 2).
    worker_concurrency: int = Field(default=10, ge=1, le=1000)
    heartbeat_interval_s: float = Field(default=5.0, gt=0, le=300)
    lease_s: float = Field(default=30.0, gt=0, le=3600)
    poll_interval_s: float = Field(default=1.0, gt=0, le=60)
    drain_grace_s: float = Field(default=30.0, ge=0, le=3600)
    # Log a warning when a worker's event loop stands this long (0 turns the check off).
    loop_block_warn_s: float = Field(default=1.0, ge=0, le=3600)
    poison_pill_threshold: int = Field(default=3, ge=1, le=100)
    poison_pill_delay_s: float = Field(default=10.0, ge=0, le=86_400)

    # Scheduler loop intervals (seconds).
    promoter_interval_s: float = Field(default=1.0, gt=0)
    cron_interval_s: float = Field(default=1.0, gt=0)
    reaper_interval_s: float = Field(default=10.0, gt=0)
    sweep_interval_s: float = Field(default=15.0, gt=0)
    # A worker silent this long is dead (3 leases: its leases have all expired by then).
    sweep_after_s: float = Field(default=90.0, gt=0, le=86400)
    retention_interval_s: float = Field(default=3600.0, gt=0)
    retention_jobs_s: float = Field(default=7 * 86400.0, gt=0)
    retention_heartbeats_s: float = Field(default=86400.0, gt=0)
    retention_workers_s: float = Field(default=14 * 86400.0, gt=0)
    retention_batches_s: float = Field(default=7 * 86400.0, gt=0)
    retention_batch: int = Field(default=5000, ge=1, le=100_000)
    # The stats rollup (charts, /metrics counters): how often it folds new rows.
    stats_interval_s: float = Field(default=1.0, gt=0, le=3600)

    # Database health on the dashboard and /metrics: warn when the oldest transaction holding
    # the xmin horizon is older than this, or a hot table's dead tuples exceed this fraction.
    health_xmin_warn_s: float = Field(default=300.0, gt=0, le=86400 * 30)
    health_dead_ratio_warn: float = Field(default=0.2, gt=0, le=1)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Arguments, then JOBYARD_* variables, then the project's `[tool.jobyard]` table."""
        found = tool_jobyard(Path.cwd())
        if found is None:
            return (init_settings, env_settings)
        return (init_settings, env_settings, InitSettingsSource(settings_cls, found[1]))

    @model_validator(mode="after")
    def _refuse_weak_secret(self) -> Settings:
        if self.env == "prod" and self.secret_key is None:
            raise ValueError("JOBYARD_SECRET_KEY must be set when JOBYARD_ENV=prod")
        if self.secret_key is not None and len(self.secret_key.get_secret_value()) < 32:
            raise ValueError("JOBYARD_SECRET_KEY must be at least 32 characters")
        if self.heartbeat_interval_s >= self.lease_s:
            raise ValueError("heartbeat_interval_s must be shorter than lease_s")
        if self.pool_min_size > self.pool_max_size:
            raise ValueError("pool_min_size must not exceed pool_max_size")
        return self


# Keys a project may set in pyproject.toml's [tool.jobyard]: what belongs to the code base.
# Secrets and the server URL stay in the environment (a committed file is no place for them).
TOOL_KEYS = frozenset(
    {"project", "data_dir", "env", "log_level", "log_format", "worker_concurrency", "api_port"}
)


def tool_jobyard(start: Path) -> tuple[Path, dict[str, Any]] | None:
    """The nearest pyproject.toml above `start` with a [tool.jobyard] table, and its values
    (data_dir made absolute against the file's directory). None when there is none."""
    for directory in (start.resolve(), *start.resolve().parents):
        path = directory / "pyproject.toml"
        if not path.is_file():
            continue
        try:
            table = tomllib.loads(path.read_text(encoding="utf-8")).get("tool", {}).get("jobyard")
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise ConfigurationError(f"cannot read {path}: {exc}") from None
        if table is None:
            continue
        if not isinstance(table, dict):
            raise ConfigurationError(f"{path}: [tool.jobyard] must be a table")
        unknown = sorted(set(table) - TOOL_KEYS)
        if unknown:
            raise ConfigurationError(
                f"{path}: [tool.jobyard] does not take {', '.join(unknown)} "
                f"(it takes {', '.join(sorted(TOOL_KEYS))}; the database URL and secrets "
                "go in JOBYARD_* environment variables)"
            )
        values = dict(table)
        if isinstance(values.get("data_dir"), str):
            values["data_dir"] = str(directory / values["data_dir"])
        return path, values
    return None
