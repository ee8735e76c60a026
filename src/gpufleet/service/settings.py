"""Settings of the control-plane service: ONE pydantic-settings class, read from ``GPUFLEET_*`` variables.

Every field states its unit and why its default. Unsafe values are refused at construction (a
:class:`pydantic.ValidationError` naming the field), so a misconfigured server never starts.
"""

from __future__ import annotations

from decimal import Decimal
from ipaddress import ip_address

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

ALLOWED_DB_SCHEMES = ("sqlite", "sqlite+pysqlite", "postgresql+psycopg")


class Settings(BaseSettings):
    """Service settings. Environment: ``GPUFLEET_DB_URL``, ``GPUFLEET_PORT``, ... (case-insensitive)."""

    model_config = SettingsConfigDict(env_prefix="GPUFLEET_", extra="forbid", frozen=True)

    db_url: str = Field(
        default="sqlite:///./gpufleet.db",
        description="SQLAlchemy URL. A SQLite file by default (zero setup); postgresql+psycopg://... in production.",
    )
    host: str = Field(default="127.0.0.1", description="Bind address. Loopback by default: the API holds spend.")
    port: int = Field(default=8000, ge=1, le=65535, description="TCP port.")
    allow_public_bind: bool = Field(
        default=False, description="Must be true to bind a non-loopback address (put TLS in front first)."
    )
    approval_threshold_usd: Decimal = Field(
        default=Decimal("100000"),
        description="Reservations whose estimated cost (USD over the term) exceeds this need two approvals "
        "(one finops_admin, one ml_platform_admin). 100k USD ~ 3 H100s reserved for a year.",
    )
    approval_window_days: int = Field(
        default=30,
        ge=1,
        le=366,
        description="Rolling window, days, of a requester's commitments that count toward the approval threshold: "
        "reservations created in it (not rejected or cancelled) are added up, so splitting an order under the "
        "threshold still needs two approvals.",
    )
    provider_max_attempts: int = Field(
        default=3, ge=1, le=10, description="Provider submission attempts (same idempotency key) before giving up."
    )
    provider_timeout_s: float = Field(default=10.0, gt=0, le=300, description="Timeout of one provider call, seconds.")
    reconcile_interval_s: float = Field(
        default=30.0,
        ge=0,
        description="Seconds between reconciler passes while serving (0 = only at startup). The reconciler "
        "submits approved reservations left behind by a crash and activates/expires commitments.",
    )
    sqlite_busy_timeout_s: float = Field(
        default=30.0, gt=0, le=600, description="How long a SQLite writer waits for the lock, seconds."
    )
    worker_threads: int = Field(
        default=8,
        ge=1,
        le=200,
        description="Threads that run request handlers (database work). A handful saturates a few cores; more "
        "only add GIL contention and queueing under bursts. Keep it <= the database pool size (10).",
    )
    token_cache_s: float = Field(
        default=5.0,
        ge=0,
        le=60,
        description="Seconds a verified token stays cached in the process (0 = look up every request). Bounds how "
        "long a revoked token keeps working.",
    )

    @field_validator("db_url")
    @classmethod
    def _db_url_is_supported(cls, value: str) -> str:
        scheme = value.split("://", 1)[0]
        if "://" not in value or scheme not in ALLOWED_DB_SCHEMES:
            raise ValueError(f"scheme must be one of {', '.join(ALLOWED_DB_SCHEMES)}, got {scheme!r}")
        if scheme.startswith("sqlite") and (value.rstrip("/").endswith(":memory:") or value.endswith("://")):
            raise ValueError("in-memory SQLite loses every reservation on restart; give a file path")
        return value

    @field_validator("approval_threshold_usd")
    @classmethod
    def _threshold_not_negative(cls, value: Decimal) -> Decimal:
        if value < 0:
            raise ValueError("must be >= 0")
        return value

    @model_validator(mode="after")
    def _public_bind_is_explicit(self) -> Settings:
        try:
            loopback = ip_address(self.host).is_loopback
        except ValueError:
            loopback = self.host == "localhost"
        if not loopback and not self.allow_public_bind:
            raise ValueError(
                f"host {self.host!r} is not loopback; set GPUFLEET_ALLOW_PUBLIC_BIND=true to bind it deliberately"
            )
        return self

    @property
    def is_sqlite(self) -> bool:
        return self.db_url.startswith("sqlite")
