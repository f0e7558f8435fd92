"""All configuration in one pydantic-settings class, read from JOBYARD_* variables.

Built once by the CLI or an app factory and passed down; never a module global.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

DEV_SECRET = "jobyard-dev-secret-change-me-0123456789abcdef"  # noqa: S105 - refused outside dev/test


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="JOBYARD_", extra="ignore", frozen=True)

    env: Literal["dev", "test", "prod"] = "dev"
    database_url: str | None = Field(
        default=None, validation_alias=AliasChoices("JOBYARD_DATABASE_URL", "DATABASE_URL")
    )
    data_dir: Path = Path(".jobyard")
    secret_key: SecretStr = SecretStr(DEV_SECRET)
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["json", "console"] = "json"

    pool_min_size: int = Field(default=1, ge=1, le=100)
    pool_max_size: int = Field(default=10, ge=1, le=200)

    # When set, GET /metrics needs `Authorization: Bearer <token>`; unset, it is public.
    metrics_token: SecretStr | None = None

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
    poison_pill_threshold: int = Field(default=3, ge=1, le=100)

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
    retention_batch: int = Field(default=5000, ge=1, le=100_000)
    # The stats rollup (charts, /metrics counters): how often it folds new rows.
    stats_interval_s: float = Field(default=1.0, gt=0, le=3600)

    # Database health on the dashboard and /metrics: warn when the oldest transaction holding
    # the xmin horizon is older than this, or a hot table's dead tuples exceed this fraction.
    health_xmin_warn_s: float = Field(default=300.0, gt=0, le=86400 * 30)
    health_dead_ratio_warn: float = Field(default=0.2, gt=0, le=1)

    @property
    def pgdata(self) -> Path:
        return self.data_dir / "pgdata"

    @model_validator(mode="after")
    def _refuse_dev_secret_in_prod(self) -> Settings:
        if self.env == "prod" and self.secret_key.get_secret_value() == DEV_SECRET:
            raise ValueError(
                "JOBYARD_SECRET_KEY must be set to a private value when JOBYARD_ENV=prod"
            )
        if self.env == "prod" and len(self.secret_key.get_secret_value()) < 32:
            raise ValueError("JOBYARD_SECRET_KEY must be at least 32 characters")
        if self.heartbeat_interval_s >= self.lease_s:
            raise ValueError("heartbeat_interval_s must be shorter than lease_s")
        if self.pool_min_size > self.pool_max_size:
            raise ValueError("pool_min_size must not exceed pool_max_size")
        return self
