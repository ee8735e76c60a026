"""Settings of the control-plane service: ONE pydantic-settings class, read from ``GPUFLEET_*`` variables.

Every field states its unit and why its default. Unsafe values are refused at construction (a
:class:`pydantic.ValidationError` naming the field), so a misconfigured server never starts.
"""

from __future__ import annotations

from decimal import Decimal
from ipaddress import ip_address
from typing import Literal

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
    provider_timeout_s: float = Field(
        default=10.0,
        gt=0,
        le=300,
        description="Read timeout of one provider API call, seconds (provider=aws: each boto3 call). The "
        "simulated provider makes no network call and does not read it.",
    )
    reconcile_interval_s: float = Field(
        default=30.0,
        ge=0,
        le=86_400,
        allow_inf_nan=False,
        description="Seconds between reconciler passes while serving (0 = only at startup; at most a day: a longer "
        "or infinite interval would stop the periodic pass without a word). The reconciler "
        "submits approved reservations left behind by a crash and activates/expires commitments. With several "
        "processes on PostgreSQL keep it > 0: the same loop lets the leader submit approvals taken by followers.",
    )
    plan_interval_s: float = Field(
        default=86_400.0,
        ge=0,
        le=366 * 86_400,
        allow_inf_nan=False,
        description="Seconds between the leader's planning passes (0 = never in the background, at most 366 days; "
        "`gpufleet "
        "reconcile --once` still plans): forecast each SKU from the utilization ingested, propose the reservations "
        "due into the approval workflow and re-evaluate placements (service/reconciler.py). Daily by default: the "
        "procurement cadence, counted from the last pass any process recorded (a store with none is first planned "
        "one period after its leader took the lead). Runs only while the reconciler runs periodically "
        "(reconcile_interval_s > 0).",
    )
    plan_retry_s: float = Field(
        default=300.0,
        ge=0,
        le=86_400,
        allow_inf_nan=False,
        description="Seconds after a partial planning pass (stopped early: the store blocked or slow, its deadline, "
        "the SKUs and clusters it skipped named in its audit event; or steps failed on the store's availability: "
        "rows other sessions held) before the next is tried, doubled for each partial pass in "
        "a row and never more than plan_interval_s; a complete pass puts the cadence back to plan_interval_s. "
        "Default 300 (5 minutes, then 10, 20, ...); 0 = a partial pass waits plan_interval_s like a complete one.",
    )
    plan_pass_deadline_s: float = Field(
        default=900.0,
        ge=0,
        le=86_400,
        allow_inf_nan=False,
        description="Seconds a planning pass may run: past them it stops before its next step (a SKU's forecast, a "
        "SKU-region's plan, a cluster's placements), names the rest as skipped in its audit event and is retried "
        "after plan_retry_s, the skipped SKUs and clusters first. Bounds a pass on a store slow just under the "
        "statement timeout, during which the leader loop submits nothing. Default 900 (15 minutes); 0 = no deadline.",
    )
    ingest_grace_h: int = Field(
        default=3,
        ge=0,
        le=24,
        description="Hours a planning pass waits for utilization still being ingested: the last hours before "
        "midnight that a source which reported in the day before has not delivered yet take the same hour of the "
        "day before, at most this many (a source silent for longer is read as stopped; 0 = read them as they are). "
        "Summed while their records arrive they read low, and two low hours hold the procurer's buying "
        "(service/late_hours.py).",
    )
    leader_poll_s: float = Field(
        default=1.0,
        gt=0,
        le=60,
        description="Seconds between leader-lock checks (PostgreSQL: several API processes, one leader runs the "
        "reconciler and provider submission). Bounds how long a dead leader's work waits for a follower to take "
        "over, and how long an approval taken by a follower waits for submission.",
    )
    sim_provider_latency_s: float = Field(
        default=0.0,
        ge=0,
        le=60,
        description="Seconds the simulated provider takes to answer an order (0 = instant). For demos and "
        "failover drills only; a real provider adapter ignores it.",
    )
    placement_preemption_hold_s: int = Field(
        default=3600,
        ge=60,
        le=7 * 86_400,
        description="Seconds running work an admitted placement was told to preempt stays promised to it: meanwhile "
        "no other placement counts its GPUs as freed. Default 1 hour; after it, work still listed can be preempted "
        "for another admission (the preemption did not happen). Releasing the admission (DELETE "
        "/v1/placement/admissions/{key}) ends it sooner.",
    )
    placement_admission_key_retention_s: int = Field(
        default=86_400,
        ge=3600,
        le=366 * 86_400,
        description="Seconds an admission's Idempotency-Key (POST /v1/placement/recommendations with admit: true) is "
        "kept: a retry within it returns the first answer and books nothing again, and the admission can be "
        "released. Default 24 hours (longer for an unreleased admission whose budget commitment still runs); after "
        "it the key is pruned (at the next keyed admission, at most hourly per process) and a retry is a new "
        "admission.",
    )
    placement_signal_max_age_s: int = Field(
        default=21_600,
        ge=60,
        le=366 * 86_400,
        description="Seconds a pool's placement signal (`PUT /v1/placement/signals`: stockout, queue wait) counts "
        "after it was reported; older, placement ignores it (the reporter stopped reporting: a stock-out flag "
        "nobody cleared must not steer placement forever) and `GET /v1/placement/signals` shows it `stale`. "
        "Default 6 hours; a reporter repeats its signal within it.",
    )
    sqlite_busy_timeout_s: float = Field(
        default=30.0, gt=0, le=600, description="How long a SQLite writer waits for the lock, seconds."
    )
    db_connect_timeout_s: float = Field(
        default=5.0,
        gt=0,
        le=120,
        description="How long opening a database connection, or waiting for a free one in the pool, may take, "
        "seconds. A database that does not answer then fails fast (503 + Retry-After) instead of hanging requests.",
    )
    db_statement_timeout_s: float = Field(
        default=30.0,
        gt=0,
        le=3600,
        description="Longest one SQL statement may run, seconds (PostgreSQL statement_timeout, which includes lock "
        "waits; on SQLite a progress handler interrupts it). The slowest legitimate statement (a 7-day FinOps "
        "snapshot) takes well under 1 s.",
    )
    max_body_bytes: int = Field(
        default=1024 * 1024,
        ge=1024,
        le=1024**3,
        description="Largest JSON request body, bytes (1 MiB: the largest legitimate body, a plan proposal, is a "
        "few kB). Larger is refused with 413 before it is read whole.",
    )
    max_upload_bytes: int = Field(
        default=8 * 1024 * 1024,
        ge=1024,
        le=1024**3,
        description="Largest utilization upload (POST /v1/utilization:ingest, JSON or CSV), bytes: 10,000 records "
        "fit in ~1.5 MB; counted while the body streams in, refused with 413 past the limit.",
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

    provider: Literal["simulated", "aws", "gcp", "azure"] = Field(
        default="simulated",
        description="Where reservations are bought: 'simulated' (a table in this database; zero setup), 'aws' "
        "(EC2 capacity reservations, Capacity Blocks, Service Quotas, prices; the standard AWS credential chain), "
        "'gcp' (Compute Engine reservations and future reservations, Cloud Quotas; Application Default "
        "Credentials) or 'azure' (capacity reservations and future capacity reservations; DefaultAzureCredential).",
    )
    aws_regions: list[str] = Field(
        default_factory=lambda: ["us-east-1"],
        description="AWS regions the fleet uses (JSON list in GPUFLEET_AWS_REGIONS). Quotas and prices are read "
        "for each; capacity reservations are looked up in each.",
    )
    aws_account_ids: list[str] = Field(
        default_factory=list, description="AWS accounts the credentials are expected to reach (informational)."
    )
    aws_profile: str | None = Field(
        default=None,
        description="Named profile of the shared AWS config; None = the default credential chain (environment, "
        "config files, SSO, instance/container role). No AWS secret is ever a gpufleet setting.",
    )
    aws_endpoint_url: str | None = Field(
        default=None, description="An alternative endpoint for every AWS service (a local emulator); None = AWS."
    )
    aws_availability_zones: dict[str, str] = Field(
        default_factory=dict, description="AZ per region for capacity reservations (default: '<region>a')."
    )
    aws_instance_match_criteria: Literal["open", "targeted"] = Field(
        default="open",
        description="Capacity reservations: 'open' (any matching instance uses them) or 'targeted' (only instances "
        "launched into the reservation).",
    )
    aws_max_attempts: int = Field(
        default=3, ge=1, le=10, description="botocore standard-retry-mode attempts per AWS call (with backoff)."
    )
    aws_dry_run: bool = Field(
        default=False, description="Print the AWS calls that would be made (validated by the model), send none."
    )
    aws_file_quota_increases: bool = Field(
        default=False,
        description="File the drafted Service Quotas increase requests when the outlook says to (false: draft "
        "only; a person files them with POST /v1/quotas/increases).",
    )
    aws_quota_cache_s: float = Field(
        default=300.0, ge=0, le=86400, description="Seconds quota readings from Service Quotas are reused."
    )

    gcp_project: str | None = Field(
        default=None, description="With provider 'gcp': the Google Cloud project that holds the reservations."
    )
    gcp_regions: list[str] = Field(
        default_factory=lambda: ["us-central1"],
        description="GCP regions the fleet uses (JSON list in GPUFLEET_GCP_REGIONS); a reservation is looked up in "
        "each region's zone.",
    )
    gcp_zones: dict[str, str] = Field(
        default_factory=dict, description="Zone per GCP region for reservations (default: '<region>-a')."
    )
    gcp_endpoint_url: str | None = Field(
        default=None, description="Another Compute Engine API root (an emulator); None = Google."
    )
    gcp_credentials: Literal["adc", "none"] = Field(
        default="adc",
        description="'adc': Application Default Credentials (GKE Workload Identity, the VM's service account, "
        "GOOGLE_APPLICATION_CREDENTIALS); 'none': no credentials, only with gcp_endpoint_url (an emulator). No "
        "Google secret is ever a gpufleet setting.",
    )
    gcp_max_attempts: int = Field(
        default=3, ge=1, le=10, description="Attempts per Compute Engine call on no answer, 429 or 5xx (backoff)."
    )
    gcp_specific_reservation_required: bool = Field(
        default=False,
        description="Reservations consumed only by VMs that name them (true) or by any matching VM (false).",
    )
    gcp_operation_wait_s: float = Field(
        default=20.0,
        ge=0,
        le=600,
        description="Seconds a submission follows GCP's insert operation before answering it pending.",
    )
    gcp_quotas_endpoint_url: str | None = Field(
        default=None,
        description="Another Cloud Quotas API root (an emulator); None = Google. With gcp_credentials 'none' and no "
        "such endpoint, GPU quotas are not read from GCP (the stored quotas apply).",
    )
    gcp_billing_endpoint_url: str | None = Field(
        default=None,
        description="Another Cloud Billing API root (an emulator of its public SKU catalog); None = Google. With "
        "gcp_credentials 'none' and no such endpoint, prices are not read from GCP (POST /v1/catalog/prices:sync "
        "answers 409).",
    )
    gcp_quota_contact_email: str | None = Field(
        default=None,
        pattern=r"^[^@\s]+@[^@\s]+$",
        description="The contact email Google requires on a quota increase request (without it none is filed).",
    )
    gcp_file_quota_increases: bool = Field(
        default=False,
        description="File the drafted GPU quota increases (Cloud Quotas preferences) when the outlook says to "
        "(false: draft only; a person files them with POST /v1/quotas/increases).",
    )
    gcp_quota_cache_s: float = Field(
        default=300.0, ge=0, le=86400, description="Seconds GPU quota readings from Cloud Quotas are reused."
    )

    azure_subscription_id: str | None = Field(
        default=None, description="With provider 'azure': the subscription that holds the capacity reservations."
    )
    azure_resource_group: str | None = Field(
        default=None, description="With provider 'azure': the resource group gpufleet creates its reservations in."
    )
    azure_regions: list[str] = Field(
        default_factory=lambda: ["eastus"],
        description="Azure locations the fleet uses (JSON list in GPUFLEET_AZURE_REGIONS); orders elsewhere are "
        "refused.",
    )
    azure_zones: dict[str, str] = Field(
        default_factory=dict,
        description="Availability zone per Azure location for reservations ('1'; none: a regional reservation).",
    )
    azure_endpoint_url: str | None = Field(
        default=None, description="Another Azure Resource Manager root (an emulator); None = Azure."
    )
    azure_credentials: Literal["default", "none"] = Field(
        default="default",
        description="'default': DefaultAzureCredential (AKS workload identity, a managed identity, the environment's "
        "service principal, the Azure CLI login); 'none': no credentials, only with azure_endpoint_url (an "
        "emulator). No Azure secret is ever a gpufleet setting.",
    )
    azure_prices_url: str = Field(
        default="https://prices.azure.com/api/retail/prices",
        description="The Retail Prices API (public, no credentials) the price sync reads; another for an emulator.",
    )
    azure_quota_cache_s: float = Field(
        default=300.0, ge=0, le=86400, description="Seconds compute quota readings from Azure are reused."
    )
    azure_max_attempts: int = Field(
        default=3, ge=1, le=10, description="Attempts per Azure call on no answer, 429 or 5xx (Retry-After or backoff)."
    )

    @field_validator(
        "aws_endpoint_url",
        "gcp_endpoint_url",
        "gcp_quotas_endpoint_url",
        "gcp_billing_endpoint_url",
        "azure_endpoint_url",
        "azure_prices_url",
    )
    @classmethod
    def _endpoint_is_http(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(f"must start with http:// or https://, got {value!r}")
        return value

    @field_validator("db_url")
    @classmethod
    def _db_url_is_supported(cls, value: str) -> str:
        return check_db_url(value)

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


def check_db_url(value: str) -> str:
    """A database URL the service can open: a supported scheme, a URL SQLAlchemy parses (a port that is not a number
    or a broken ``[IPv6]`` host fails there, later, as a traceback), not an in-memory SQLite. Raises ValueError with a
    reason that never repeats the URL (it holds the password). Also the check of ``gpufleet controller``'s store."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    scheme = value.split("://", 1)[0]
    if "://" not in value or scheme not in ALLOWED_DB_SCHEMES:
        raise ValueError(f"scheme must be one of {', '.join(ALLOWED_DB_SCHEMES)}, got {scheme!r}")
    try:
        make_url(value)
    except (ValueError, ArgumentError):
        raise ValueError(
            "not a URL SQLAlchemy can parse (is the port a number, an IPv6 host in [brackets], a password with "
            "@ / : % percent-encoded?); the form is postgresql+psycopg://USER:PASSWORD@HOST:5432/DB"
        ) from None
    if scheme.startswith("sqlite") and _in_memory(value):
        raise ValueError("in-memory SQLite loses every reservation on restart; give a file path")
    return value


def _in_memory(url: str) -> bool:
    """Whether a SQLite URL opens an in-memory database: no path (``sqlite:///``), ``:memory:`` (with a query or
    not), or a ``file:`` URI with ``mode=memory``."""
    from sqlalchemy.engine import make_url

    try:
        parsed = make_url(url)
    except Exception:
        return True
    db = parsed.database or ""
    return not db or db == ":memory:" or "mode=memory" in db or parsed.query.get("mode") == "memory"
