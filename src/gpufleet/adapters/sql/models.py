"""SQLAlchemy 2 models. Money is integer micro-dollars (``_uusd``) or cents (``_cents``): exact on every backend.

Times are integer UNIX seconds (``_s``). The migrations in ``migrations/versions`` are the source of truth for
the schema; these models must match them (a test compares the two).
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Boolean, Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint, text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# a serial id that outgrows 32 bits (migration 0014): BIGINT on PostgreSQL; on SQLite INTEGER, so that the column
# stays the table's 64-bit rowid (a BIGINT PRIMARY KEY is not the rowid there and would not autoincrement)
BigSerial = BigInteger().with_variant(Integer(), "sqlite")


class Base(DeclarativeBase):
    pass


class SkuRow(Base):
    __tablename__ = "skus"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    memory_gb: Mapped[int] = mapped_column(Integer)
    gpus_per_node: Mapped[int] = mapped_column(Integer)
    cpu_per_node: Mapped[int] = mapped_column(Integer)
    mem_gb_per_node: Mapped[int] = mapped_column(Integer)
    interconnect: Mapped[str] = mapped_column(String(64))
    relative_throughput: Mapped[float] = mapped_column(Float)


class ProviderRow(Base):
    __tablename__ = "providers"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    kind: Mapped[str] = mapped_column(String(32))


class RegionRow(Base):
    __tablename__ = "regions"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    provider_id: Mapped[str] = mapped_column(ForeignKey("providers.id"))
    geo: Mapped[str] = mapped_column(String(32))


class PoolRow(Base):
    __tablename__ = "pools"
    __table_args__ = (Index("ix_pools_sku", "sku_id"),)
    id: Mapped[str] = mapped_column(String(200), primary_key=True)
    provider_id: Mapped[str] = mapped_column(ForeignKey("providers.id"))
    region_id: Mapped[str] = mapped_column(ForeignKey("regions.id"))
    sku_id: Mapped[str] = mapped_column(ForeignKey("skus.id"))
    tier: Mapped[str] = mapped_column(String(16))
    price_uusd_per_gpu_h: Mapped[int] = mapped_column(BigInteger)
    term_months: Mapped[int] = mapped_column(Integer, default=0)
    lead_time_s: Mapped[int] = mapped_column(Integer, default=0)
    quota_gpus: Mapped[int | None] = mapped_column(Integer, nullable=True)
    allocated_gpus: Mapped[int] = mapped_column(Integer, default=0)
    preemption_rate_per_h: Mapped[float] = mapped_column(Float, default=0.0)


class PoolPriceRow(Base):
    """A pool's price before one change (migration 0013): the pool charged ``price_uusd_per_gpu_h`` up to
    ``until_s`` (exclusive), from the previous change on. The current price is the pool's own."""

    __tablename__ = "pool_prices"
    pool_id: Mapped[str] = mapped_column(ForeignKey("pools.id"), primary_key=True)
    until_s: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    price_uusd_per_gpu_h: Mapped[int] = mapped_column(BigInteger)


class ClusterRow(Base):
    __tablename__ = "clusters"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    region_id: Mapped[str] = mapped_column(ForeignKey("regions.id"))


class NodeRow(Base):
    __tablename__ = "nodes"
    __table_args__ = (Index("ix_nodes_cluster", "cluster_id"),)
    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    cluster_id: Mapped[str] = mapped_column(ForeignKey("clusters.id"))
    sku_id: Mapped[str] = mapped_column(ForeignKey("skus.id"))
    gpus_total: Mapped[int] = mapped_column(Integer)
    allocations_json: Mapped[str] = mapped_column(Text, default="[]")


class TeamRow(Base):
    __tablename__ = "teams"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))


class TenantRow(Base):
    __tablename__ = "tenants"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    team_id: Mapped[str] = mapped_column(ForeignKey("teams.id"))


class WorkloadRow(Base):
    __tablename__ = "workloads"
    __table_args__ = (Index("ix_workloads_team", "team_id"),)
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    image: Mapped[str] = mapped_column(String(500))
    kind: Mapped[str] = mapped_column(String(16))
    cpu: Mapped[float] = mapped_column(Float)
    mem_gb: Mapped[float] = mapped_column(Float)
    gpus: Mapped[int] = mapped_column(Integer)
    gpu_sku: Mapped[str] = mapped_column(ForeignKey("skus.id"))
    min_replicas: Mapped[int] = mapped_column(Integer)
    max_replicas: Mapped[int] = mapped_column(Integer)
    scale_metric: Mapped[str] = mapped_column(String(64))
    target_rps: Mapped[float | None] = mapped_column(Float, nullable=True)
    slo_s: Mapped[float | None] = mapped_column(Float, nullable=True)  # queue-wait SLO of a serving workload
    max_concurrency: Mapped[int | None] = mapped_column(Integer, nullable=True)  # requests one replica serves at once
    budget_cents_day: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    team_id: Mapped[str] = mapped_column(ForeignKey("teams.id"))
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"))
    priority: Mapped[str] = mapped_column(String(16))
    checkpoint_interval_s: Mapped[int | None] = mapped_column(Integer, nullable=True)
    version: Mapped[int] = mapped_column(Integer, default=1)
    created_at_s: Mapped[int] = mapped_column(BigInteger)


class RightsizingChangeRow(Base):
    __tablename__ = "rightsizing_changes"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    workload_id: Mapped[str] = mapped_column(ForeignKey("workloads.id"))
    cpu: Mapped[float] = mapped_column(Float)
    mem_gb: Mapped[float] = mapped_column(Float)
    ticket: Mapped[str] = mapped_column(String(128))
    status: Mapped[str] = mapped_column(String(16))
    requested_by: Mapped[str] = mapped_column(String(128))
    created_at_s: Mapped[int] = mapped_column(BigInteger)


class UtilizationRow(Base):
    """One measured bucket; the primary key is the ingestion idempotency key."""

    __tablename__ = "utilization"
    __table_args__ = (
        Index("ix_util_sku_time", "sku_id", "bucket_start_s"),
        Index("ix_util_workload_time", "workload_id", "bucket_start_s"),
        Index("ix_util_pool_time", "pool_id", "bucket_start_s"),
        Index("ix_util_team_time", "team_id", "bucket_start_s"),
    )
    source: Mapped[str] = mapped_column(String(128), primary_key=True)
    bucket_start_s: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    workload_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    bucket_s: Mapped[int] = mapped_column(Integer)
    team_id: Mapped[str] = mapped_column(String(64))
    sku_id: Mapped[str] = mapped_column(String(64))
    gpus_allocated: Mapped[float] = mapped_column(Float)
    gpu_util: Mapped[float | None] = mapped_column(Float, nullable=True)  # None: held GPUs measured, busy share not
    queue_wait_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    pool_id: Mapped[str | None] = mapped_column(String(200), nullable=True)  # the pool the GPUs ran in (None: unknown)
    # the most GPU memory one replica (pod) used in the bucket, GB over its GPUs (None: not measured)
    gpu_mem_gb: Mapped[float | None] = mapped_column(Float, nullable=True)


class ReservationRow(Base):
    __tablename__ = "reservations"
    __table_args__ = (
        Index("ix_reservations_status", "status"),
        UniqueConstraint("created_by", "client_key", name="uq_reservations_creator_client_key"),
        Index("ix_reservations_creator_created", "created_by", "created_at_s"),
        Index("ix_reservations_group", "group_id"),
    )
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    pool_id: Mapped[str] = mapped_column(ForeignKey("pools.id"))
    sku_id: Mapped[str] = mapped_column(ForeignKey("skus.id"))
    region_id: Mapped[str] = mapped_column(ForeignKey("regions.id"))
    units: Mapped[int] = mapped_column(Integer)
    start_s: Mapped[int] = mapped_column(BigInteger)
    term_months: Mapped[int] = mapped_column(Integer)
    price_uusd_per_gpu_h: Mapped[int] = mapped_column(BigInteger)
    est_cost_cents: Mapped[int] = mapped_column(BigInteger)
    status: Mapped[str] = mapped_column(String(32))
    version: Mapped[int] = mapped_column(Integer, default=1)
    approvals_required: Mapped[int] = mapped_column(Integer)
    created_by: Mapped[str] = mapped_column(String(128))
    created_at_s: Mapped[int] = mapped_column(BigInteger)
    budget_code: Mapped[str | None] = mapped_column(String(64), nullable=True)
    idempotency_key: Mapped[str] = mapped_column(String(128), unique=True)
    provider_order_id: Mapped[str | None] = mapped_column(String(128), nullable=True)
    client_key: Mapped[str | None] = mapped_column(String(64), nullable=True)  # the creator's Idempotency-Key
    request_fingerprint: Mapped[str | None] = mapped_column(String(64), nullable=True)  # what the key was used with
    group_id: Mapped[str | None] = mapped_column(String(64), nullable=True)  # head of a multi-region group
    # the provider operation still running when the order was submitted (its outcome is the order's; migration 0016)
    provider_operation_id: Mapped[str | None] = mapped_column(String(256), nullable=True)
    status_reason: Mapped[str | None] = mapped_column(String(500), nullable=True)  # the provider's why of the status


class ApprovalRow(Base):
    """One approval; the primary key makes "the same user approves twice" impossible even under races."""

    __tablename__ = "reservation_approvals"
    reservation_id: Mapped[str] = mapped_column(ForeignKey("reservations.id"), primary_key=True)
    user_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    role: Mapped[str] = mapped_column(String(32))
    budget_code: Mapped[str] = mapped_column(String(64))
    at_s: Mapped[int] = mapped_column(BigInteger)


class AuditEventRow(Base):
    """Append-only: database triggers refuse UPDATE, DELETE, REPLACE (SQLite) and TRUNCATE (PostgreSQL); on
    PostgreSQL the table belongs to an audit role the service's role cannot act as (``adapters/sql/roles.py``)."""

    __tablename__ = "audit_events"
    __table_args__ = (Index("ix_audit_entity", "entity_id"), Index("ix_audit_action_at", "action", "at_s"))
    id: Mapped[int] = mapped_column(BigSerial, primary_key=True, autoincrement=True)
    at_s: Mapped[int] = mapped_column(BigInteger)
    actor: Mapped[str] = mapped_column(String(128))
    action: Mapped[str] = mapped_column(String(64))
    entity: Mapped[str] = mapped_column(String(32))
    entity_id: Mapped[str] = mapped_column(String(200))
    detail_json: Mapped[str] = mapped_column(Text, default="{}")


class LeaderFenceRow(Base):
    """The leader's fencing epoch (migration 0015): one row, ``id`` 1, bumped by each process that takes the leader
    lock (service/leader.py); the leader's write transactions check it before they commit (service/uow.py)."""

    __tablename__ = "leader_fence"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    epoch: Mapped[int] = mapped_column(BigInteger)
    holder: Mapped[str] = mapped_column(String(200))


class ApiTokenRow(Base):
    __tablename__ = "api_tokens"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    user_id: Mapped[str] = mapped_column(String(128))
    role: Mapped[str] = mapped_column(String(32))
    team_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    created_at_s: Mapped[int] = mapped_column(BigInteger)
    revoked: Mapped[bool] = mapped_column(Boolean, default=False)
    expires_at_s: Mapped[int | None] = mapped_column(BigInteger, nullable=True)  # migration 0005; NULL: never


class SimProviderOrderRow(Base):
    """The simulated cloud provider's own book of orders (a separate world: committed on its own)."""

    __tablename__ = "sim_provider_orders"
    __table_args__ = (UniqueConstraint("order_id"),)
    idempotency_key: Mapped[str] = mapped_column(String(128), primary_key=True)
    order_id: Mapped[str] = mapped_column(String(64))
    sku_id: Mapped[str] = mapped_column(String(64))
    region_id: Mapped[str] = mapped_column(String(64))
    units: Mapped[int] = mapped_column(Integer)
    term_months: Mapped[int] = mapped_column(Integer)
    start_s: Mapped[int] = mapped_column(BigInteger)
    created_at_s: Mapped[int] = mapped_column(BigInteger)


class PoolSignalRow(Base):
    """Live placement signals of a pool (migration 0004): a provider's stockout and the expected queue wait."""

    __tablename__ = "pool_signals"
    pool_id: Mapped[str] = mapped_column(ForeignKey("pools.id"), primary_key=True)
    stockout: Mapped[bool] = mapped_column(Boolean, default=False)
    queue_wait_s: Mapped[int | None] = mapped_column(Integer, nullable=True)
    updated_at_s: Mapped[int] = mapped_column(BigInteger)


class PlacementVictimRow(Base):
    """Running work an admitted placement was told to preempt (migration 0017), promised to that admission until
    ``expires_at_s``: no other placement counts its GPUs as freed meanwhile."""

    __tablename__ = "placement_victims"
    pool_id: Mapped[str] = mapped_column(ForeignKey("pools.id"), primary_key=True)
    workload_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    admitted_by: Mapped[str] = mapped_column(String(200))  # the user whose admission it was promised to
    gpus: Mapped[int] = mapped_column(Integer)
    promised_at_s: Mapped[int] = mapped_column(BigInteger)
    expires_at_s: Mapped[int] = mapped_column(BigInteger)


class PlacementAdmissionRow(Base):
    """An admission's ``Idempotency-Key`` (migration 0018), per caller: the request fingerprint it is bound to, the
    pool it booked in (None: it queued) and its answer (written in the transaction that books; None only in a row an
    older version recorded, whose process died before writing the answer after its commit)."""

    __tablename__ = "placement_admissions"
    admitted_by: Mapped[str] = mapped_column(String(200), primary_key=True)
    client_key: Mapped[str] = mapped_column(String(64), primary_key=True)
    fingerprint: Mapped[str] = mapped_column(String(64))
    pool_id: Mapped[str | None] = mapped_column(String(200), nullable=True)  # no foreign key: a pool may go
    created_at_s: Mapped[int] = mapped_column(BigInteger)
    answer_json: Mapped[str | None] = mapped_column(Text, nullable=True)
    # what a release gives back (migration 0020): the GPUs it added to its pool's allocated_gpus, its budget commitment
    taken_gpus: Mapped[int | None] = mapped_column(Integer, nullable=True)
    commitment_id: Mapped[int | None] = mapped_column(BigInteger, nullable=True)  # no foreign key: as pool_id
    release_json: Mapped[str | None] = mapped_column(Text, nullable=True)  # the release's answer; None: not released


class ForecastIssueRow(Base):
    """One served capacity forecast with its issue time (migration 0004), scored later against actuals.

    ``values_json`` is the quantile matrix (len(quantiles) x horizon); step k covers ``start_s + k * step_s``.
    """

    __tablename__ = "forecast_issues"
    __table_args__ = (Index("ix_forecast_issues_series_time", "series_id", "issued_at_s"),)
    id: Mapped[int] = mapped_column(BigSerial, primary_key=True, autoincrement=True)
    series_id: Mapped[str] = mapped_column(String(64))
    model: Mapped[str] = mapped_column(String(128))
    issued_at_s: Mapped[int] = mapped_column(BigInteger)
    start_s: Mapped[int] = mapped_column(BigInteger)
    step_s: Mapped[int] = mapped_column(Integer)
    scale: Mapped[float] = mapped_column(Float)
    quantiles_json: Mapped[str] = mapped_column(Text)
    values_json: Mapped[str] = mapped_column(Text)


class TeamBudgetRow(Base):
    """A team's spending limit per calendar period (migration 0006), enforced when work is admitted."""

    __tablename__ = "team_budgets"
    team_id: Mapped[str] = mapped_column(ForeignKey("teams.id"), primary_key=True)
    limit_cents: Mapped[int] = mapped_column(BigInteger)
    period: Mapped[str] = mapped_column(String(8))  # day | week | month (UTC calendar)
    enforce: Mapped[bool] = mapped_column(Boolean)
    alert_at_json: Mapped[str] = mapped_column(Text)
    version: Mapped[int] = mapped_column(Integer)
    updated_at_s: Mapped[int] = mapped_column(BigInteger)
    updated_by: Mapped[str] = mapped_column(String(128))


class BudgetCommitmentRow(Base):
    """Work admitted (or degraded) against a team budget: its expected spend rate over [start_s, end_s)."""

    __tablename__ = "budget_commitments"
    __table_args__ = (Index("ix_budget_commitments_team_end", "team_id", "end_s"),)
    id: Mapped[int] = mapped_column(BigSerial, primary_key=True, autoincrement=True)
    team_id: Mapped[str] = mapped_column(ForeignKey("teams.id"))
    created_at_s: Mapped[int] = mapped_column(BigInteger)
    start_s: Mapped[int] = mapped_column(BigInteger)
    end_s: Mapped[int] = mapped_column(BigInteger)
    rate_uusd_per_h: Mapped[int] = mapped_column(BigInteger)
    action: Mapped[str] = mapped_column(String(16))
    pool_id: Mapped[str | None] = mapped_column(String(200), nullable=True)


class PlannedRunRow(Base):
    """A large training run registered ahead of time (migration 0010): the planned-run calendar the procurer
    reserves ahead of (``control/planned_runs.py``). Cancelled runs (``cancelled_at_s`` set) stay for the record
    and no longer count; a team's name is unique among its runs that are not cancelled."""

    __tablename__ = "planned_runs"
    __table_args__ = (
        Index("ix_planned_runs_sku_region", "sku_id", "region_id"),
        Index(
            "uq_planned_runs_team_name_active",
            "team_id",
            "name",
            unique=True,
            sqlite_where=text("cancelled_at_s IS NULL"),
            postgresql_where=text("cancelled_at_s IS NULL"),
        ),
    )
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    team_id: Mapped[str] = mapped_column(ForeignKey("teams.id"))
    sku_id: Mapped[str] = mapped_column(ForeignKey("skus.id"))
    region_id: Mapped[str] = mapped_column(ForeignKey("regions.id"))
    gpus: Mapped[int] = mapped_column(Integer)
    start_s: Mapped[int] = mapped_column(BigInteger)
    duration_s: Mapped[int] = mapped_column(BigInteger)
    probability: Mapped[float] = mapped_column(Float)
    registered_s: Mapped[int] = mapped_column(BigInteger)  # the service clock when it was registered
    created_by: Mapped[str] = mapped_column(String(128))
    cancelled_at_s: Mapped[int | None] = mapped_column(BigInteger, nullable=True)  # NULL: active
    cancelled_by: Mapped[str | None] = mapped_column(String(128), nullable=True)


class CapacityBlockPurchaseRow(Base):
    """A Capacity Block purchase above the spend threshold, waiting for or past its two approvals (migration
    0011; ``service/capacity_blocks.py``). ``version`` guards every status change (a conditional UPDATE)."""

    __tablename__ = "capacity_block_purchases"
    __table_args__ = (
        Index("ix_cb_purchases_status", "status"),
        Index(
            "uq_cb_purchases_offering_open",
            "offering_id",
            unique=True,
            sqlite_where=text("status IN ('pending_approval', 'approved')"),
            postgresql_where=text("status IN ('pending_approval', 'approved')"),
        ),
    )
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    offering_id: Mapped[str] = mapped_column(String(64))
    region_id: Mapped[str] = mapped_column(String(64))
    sku_id: Mapped[str] = mapped_column(ForeignKey("skus.id"))
    gpus: Mapped[int] = mapped_column(Integer)  # the search the offering was listed under
    duration_h: Mapped[int] = mapped_column(Integer)
    start_after_s: Mapped[int] = mapped_column(BigInteger)
    end_before_s: Mapped[int] = mapped_column(BigInteger)
    instance_type: Mapped[str] = mapped_column(String(64))  # the offering as listed at the request
    availability_zone: Mapped[str] = mapped_column(String(64))
    instance_count: Mapped[int] = mapped_column(Integer)
    start_s: Mapped[int] = mapped_column(BigInteger)
    end_s: Mapped[int] = mapped_column(BigInteger)
    upfront_fee_uusd: Mapped[int] = mapped_column(BigInteger)
    currency: Mapped[str] = mapped_column(String(8))
    budget_code: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(32))
    version: Mapped[int] = mapped_column(Integer)
    approvals_required: Mapped[int] = mapped_column(Integer)
    created_by: Mapped[str] = mapped_column(String(128))
    created_at_s: Mapped[int] = mapped_column(BigInteger)
    purchase_key: Mapped[str] = mapped_column(String(128))  # gpufleet-cb-<offering id>
    capacity_reservation_id: Mapped[str | None] = mapped_column(String(128), nullable=True)


class CapacityBlockApprovalRow(Base):
    """One approval of a Capacity Block purchase; the primary key makes a double approval impossible."""

    __tablename__ = "capacity_block_approvals"
    purchase_id: Mapped[str] = mapped_column(ForeignKey("capacity_block_purchases.id"), primary_key=True)
    user_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    role: Mapped[str] = mapped_column(String(32))
    budget_code: Mapped[str] = mapped_column(String(64))
    at_s: Mapped[int] = mapped_column(BigInteger)
