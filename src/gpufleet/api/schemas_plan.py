"""Schemas of the planning routes (placement with degradation, pool signals, quota outlook, plan proposals,
forecast accuracy, autoscaling decisions). Request bodies forbid unknown fields."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, StrictBool, model_validator

from gpufleet.api.schemas import JobClass, PriorityName, Strict
from gpufleet.api.schemas_fleet import PlacementStep, SkippedStep
from gpufleet.api.types import MAX_TIME_S, Fraction, Id, PoolId, SkuId, UsdIn, UsdOut

DEFAULT_SKU = "h100_80gb"
Gpus = Annotated[int, Field(ge=1, le=100_000, strict=True)]
Replicas = Annotated[int, Field(ge=1, le=10_000, strict=True)]


class DegradeOptionIn(Strict):
    """A smaller configuration the workload accepts when its pools are exhausted (at least one field)."""

    gpus: Gpus | None = Field(default=None, description="GPUs per replica (or per gang member)")
    sku: SkuId | None = None
    min_replicas: Replicas | None = None

    @model_validator(mode="after")
    def _not_empty(self) -> DegradeOptionIn:
        if self.gpus is None and self.sku is None and self.min_replicas is None:
            raise ValueError("a degrade option names at least one of gpus, sku, min_replicas")
        return self


class RunningWorkIn(Strict):
    """Running work the caller knows about, in a pool: a candidate for preemption by higher priority."""

    workload_id: Id
    pool: PoolId
    gpus: Gpus
    priority: PriorityName
    job_class: JobClass = "training"


class PlacementRequestCreate(Strict):
    """``gpus`` per replica (gang member) x ``replicas`` (default 1: ``gpus`` is the job's total)."""

    job_class: JobClass
    priority: PriorityName
    sku: SkuId = Field(default=DEFAULT_SKU, description="GPU SKU (default h100_80gb, the fleet's main SKU)")
    gpus: Gpus = 8
    regions: Annotated[list[Id], Field(max_length=20)] = Field(default_factory=list)
    checkpointable: StrictBool = False
    replicas: Replicas = 1
    deadline_s: Annotated[int, Field(ge=0, le=MAX_TIME_S, strict=True)] | None = Field(
        default=None, description="UNIX seconds by which the job must finish"
    )
    expected_run_s: Annotated[int, Field(ge=0, le=366 * 86400, strict=True)] = 0
    degrade_options: Annotated[list[DegradeOptionIn], Field(max_length=10)] = Field(default_factory=list)
    running: Annotated[list[RunningWorkIn], Field(max_length=1000)] = Field(default_factory=list)
    team: Id | None = Field(
        default=None,
        description="Team whose budget pays; an app_team token defaults to (and may only name) its own team. "
        "Without a team, or for a team without a budget, no budget admission applies (`budget` is null).",
    )
    replica_gpu_memory_gb: Annotated[int, Field(ge=1, le=10_000_000, strict=True)] | None = Field(
        default=None,
        description="GPU memory one replica (gang member) needs across its GPUs, GB (weights, activations, KV cache). "
        "A pool whose SKU's memory (the SKU registry's memory_gb) x GPUs per replica is less is skipped (trigger "
        "`gpu_memory`), for the request and for each degrade option. Omitted: not checked.",
    )
    admit: StrictBool = Field(
        default=False,
        description="Book the placement against the team's budget (an admission). Only roles that may submit "
        "work (finops_admin, ml_platform_admin, app_team for its team) may; a viewer gets 403. Without it the "
        "answer is a recommendation: `budget` shows what admission would decide, and nothing is booked.",
    )


class DegradeOut(BaseModel):
    gpus: int | None
    sku: str | None
    min_replicas: int | None


class BudgetAlertOut(BaseModel):
    level: str
    reason: str
    threshold: float


class BudgetStatusPublic(BaseModel):
    """A team budget and its current window: metered spend + what admitted work is still expected to spend."""

    team: str
    period: Literal["day", "week", "month"]
    enforce: bool
    limit_usd: UsdOut
    window_start_s: int
    window_end_s: int
    metered_usd: UsdOut
    committed_usd: UsdOut
    spent_usd: UsdOut
    remaining_usd: UsdOut
    fraction_used: float | None
    projected_fraction: float | None
    alert_at: list[float]
    alerts: list[BudgetAlertOut]
    version: int


class BudgetAdmission(BudgetStatusPublic):
    """``action`` admit | degrade | queue (never a drop), ``reason`` within_budget | over_budget_degraded |
    over_budget_queued; ``request_usd`` is the request's expected spend in the window, ``admitted_usd`` what was
    admitted (the degraded option's; null when queued), ``retry_at_s`` when the window resets (queued)."""

    action: Literal["admit", "degrade", "queue"]
    reason: str
    option: str | None
    request_usd: UsdOut
    admitted_usd: UsdOut | None
    retry_at_s: int | None
    expected_end_s: int
    booked: bool = Field(default=False, description="True when this admission was recorded (`admit: true`)")


class BudgetIn(Strict):
    limit_usd: UsdIn
    period: Literal["day", "week", "month"] = "month"
    enforce: StrictBool = Field(default=True, description="Queue or degrade work that would exceed the limit")
    alert_at: Annotated[list[Fraction], Field(min_length=1, max_length=10)] = Field(
        default_factory=lambda: [0.5, 0.8, 1.0]
    )


class PlacementRecommendation(BaseModel):
    region: str | None
    pool: str | None
    tier: str | None
    price_usd_per_gpu_h: UsdOut | None
    reason: str
    fallback: list[PlacementStep]
    skipped: list[SkippedStep]
    tiers_considered: list[str]
    action: Literal["place", "degrade", "preempt", "queue"]
    sku: str | None
    gpus: int
    degrade: DegradeOut | None
    victims: list[str]
    expected_start_s: int | None
    budget: BudgetAdmission | None = Field(
        default=None, description="The team budget's admission decision and figures (null: no budget applies)"
    )


class PoolSignalIn(Strict):
    pool: PoolId
    stockout: StrictBool = False
    queue_wait_s: Annotated[int, Field(ge=0, le=366 * 86400, strict=True)] | None = None


class PoolSignalPublic(BaseModel):
    pool: str
    stockout: bool
    queue_wait_s: int | None
    updated_at_s: int
    expires_at_s: int = Field(
        description="When placement stops counting this signal: updated_at_s + the setting placement_signal_max_age_s"
    )
    stale: bool = Field(description="True once expires_at_s has passed: placement ignores the signal")


class PlacementReleasePublic(BaseModel):
    idempotency_key: str = Field(description="The Idempotency-Key the admission was made under (the caller's)")
    pool: str | None = Field(description="The pool it booked in; null: it queued and booked nothing")
    admitted_at_s: int
    released_at_s: int = Field(description="When it was released (a second release answers the first's)")
    gpus_returned: int = Field(description="GPUs taken off the pool's allocated_gpus: those the admission added")
    victims_released: list[str] = Field(description="Running work no longer promised to it (promises still held)")
    budget_commitment_ended: bool = Field(description="Its team's budget commitment was ended at the release")


class QuotaOutlookPool(BaseModel):
    pool: str
    plan_region: str | None = Field(
        default=None,
        description="A SKU planned in several regions: the plan region whose use and reservations this pool was "
        "checked against (docs/service.md, 'Several regions'); null: the SKU's whole use and reservations",
    )
    provider: str
    region: str
    sku: str
    tier: str
    quota_gpus: int | None
    peak_demand_gpus: float
    headroom_gpus_now: float | None
    exhausts_at_s: int | None
    request_by_s: int | None
    reason: str
    quota_source: str = (
        "stored"  # read from the provider: "service_quotas" (AWS), "cloud_quotas" (GCP), "compute_usages"
    )
    quota_unread: str | None = Field(
        default=None, description="The provider's quota could not be read (its refusal or no answer): the stored one"
    )
    increase: dict[str, Any] | None = None  # the drafted increase request and any open one (AWS and GCP pools)


class QuotaOutlookPublic(BaseModel):
    now_s: int
    days: int
    increase_lead_days: int
    pools: list[QuotaOutlookPool]


class PlanProposeIn(Strict):
    """Which SKU-region the loop's procurer decides for. The procurer's horizon is the reserved pool's lead time
    and term, so there is no horizon or workload class to send (unknown fields are refused, naming the field)."""

    sku: SkuId
    region: Id
    within_days: Annotated[int, Field(ge=1, le=365, strict=True)] = Field(
        default=7,
        description="The procurement period: the days ahead the loop's forecaster forecasts for the procurer "
        "(the reconciler's within_days; default 7)",
    )


class PlanRegionPublic(BaseModel):
    """One region a SKU is planned in (control.proposing.plan_regions)."""

    region: str
    reason: str = Field(
        description="most_used_region | held_region | first_reserved_region (the main region), used_region, "
        "planned_runs_region"
    )
    own_region: bool = Field(description="True: reads only the records naming a pool of this region")
    excluded_regions: list[str] = Field(description="The main region reads every record but those of these regions")
    planned_runs: list[str] = Field(description="The runs to come registered in this region (ids)")


class SkuPlanRegions(BaseModel):
    sku: str
    plans: list[PlanRegionPublic] = Field(description="Main region first; empty: planned nowhere (no reserved pool)")
    planned_runs_not_read: list[str] = Field(description="Runs to come in a region without a reserved pool of the SKU")
    used_gpu_h_by_region: dict[str, float] = Field(
        description="GPU-hours of the lookback in records naming a stored pool of the region"
    )
    unattributed_gpu_h: float = Field(
        description="GPU-hours of the lookback in records naming no pool, or a pool not stored: planned in the main "
        "region"
    )


class PlanRegionsPublic(BaseModel):
    now_s: int = Field(description="The start of today (UTC): the day whose pass this map is")
    lookback_days: int
    skus: list[SkuPlanRegions]


class UseRead(BaseModel):
    """Which utilization records the SKU-region's plan read (service/plan_regions.py)."""

    own_region: bool = Field(
        description="True: only the records naming a pool of this region (the SKU is planned in several regions, "
        "this is not its main one). False: every record of the SKU but those naming a pool of excluded_regions"
    )
    excluded_regions: list[str] = Field(description="The SKU's other plan regions, whose use they plan themselves")


class PlanContext(BaseModel):
    """What the procurer saw: the context's summary (``ports.ProcurementContext``)."""

    now_s: int = Field(description="The start of today (UTC): the end of the measured history")
    pool: str = Field(description="The reserved pool the procurer buys from")
    history_hours: int
    late_hours_filled: int = Field(
        default=0,
        description="Last hours before midnight not yet fully ingested (a source that reported in the day before "
        "had not delivered past them), read as the same hours of the day before; at most the setting "
        "ingest_grace_h",
    )
    forecast: str | None = Field(description="The loop's forecast method (null with less than a day of history)")
    committed_gpus_at_lead: int = Field(
        description="GPUs held or on order (pending approval .. active) at now + the pool's lead time: not bought again"
    )
    gpus_per_node: int
    planned_runs: int = Field(
        default=0,
        description="Registered runs of the SKU in the region (not cancelled, not started) the procurer read",
    )
    serving_history_hours: int | None = Field(
        default=None,
        description="Hours of the SKU's serving GPUs (records of workloads registered as serving) the stock-out "
        "cover read; null when no serving workload has a record in the history (reason serving_stockout_cover)",
    )
    use_read: UseRead | None = Field(default=None, description="Which of the SKU's utilization records the plan read")


class PlanPlannedRun(BaseModel):
    """A registered run the procurer read (``GET /v1/planned-runs/{id}`` has the rest)."""

    id: str
    name: str
    team: str
    gpus: int
    start_s: int
    duration_s: int
    probability: float
    order_from_s: int | None = Field(
        default=None,
        description="From when the loop's passes weigh reserving ahead of the run: the last weekly procurement review "
        "(on a grid from the UTC epoch) whose order lands by the start (the reserved pool's lead time), or the "
        "registration (counted from the start of its day) when it comes after that review. The run is weighed by the "
        "passes of the week from then while it has not started; a pass before it orders nothing for the run yet. "
        "Null when the loop's procurer has no planned-run rule",
    )


class PlanProposal(BaseModel):
    """One proposal of the loop's procurer (``ports.ReservationProposal``)."""

    units: int
    start_s: int
    term_months: int
    reason: str


class HeldReservation(BaseModel):
    reservation_id: str
    units: int
    start_s: int
    end_s: int
    status: str


class PlanReservation(BaseModel):
    reservation_id: str
    status: str
    units: int = Field(description="GPUs proposed")
    units_bought: int = Field(
        description="GPUs the provider reserves for them: whole machines on AWS, GCP and Azure (8 for 1 H100)"
    )
    start_s: int
    term_months: int
    est_cost_usd: UsdOut = Field(
        description="What will be charged: the GPUs bought x the reservation's price x its term (the approval "
        "threshold values the same GPUs, at the larger of this price and the catalog's list price)"
    )
    approvals_required: int
    idempotency_key: str
    pool: str
    tier: str
    reason: str


class PlanSecondaryBase(BaseModel):
    """The loop's secondary base for the SKU (``control/secondary_base.py``): reported, not rented."""

    pool: str = Field(description="The cheapest secondary-provider pool of the SKU with a stored quota")
    nodes: int = Field(description="Secondary nodes to hold (the simulator launches the missing ones)")
    gpus: int
    hours_read: int = Field(description="Hours of on-demand + secondary use read (the rule reads a week)")
    reason: str


class PlanProposePublic(BaseModel):
    sku: str
    region: str
    procurer: str = Field(description="The loop's procurer that decided (ControlLoop.gpufleet(...).procurer)")
    context: PlanContext
    proposals: list[PlanProposal]
    created: list[PlanReservation]
    held: list[HeldReservation] = Field(
        default_factory=list, description="Reservations of the SKU in the region held or pending, counted first"
    )
    planned_runs: list[PlanPlannedRun] = Field(
        default_factory=list, description="The registered runs in the context (reason planned_run_reserve)"
    )
    secondary_base: PlanSecondaryBase | None = Field(
        default=None,
        description="Secondary-provider nodes the loop would hold under the GPUs rented on demand (reason "
        "secondary_base); null without a secondary pool with a quota. The service has no secondary provider's API: "
        "it reports the decision, it does not rent the nodes",
    )


class ForecastScore(BaseModel):
    model: str
    issued_at_s: int
    points: int
    mase: float | None
    pinball: float | None
    coverage_80: float | None


class SeriesAccuracy(BaseModel):
    series_id: str
    forecasts_scored: int
    forecasts_pending: int
    points: int
    mase: float | None
    pinball: float | None
    coverage_80: float | None
    by_model: dict[str, dict[str, float | None]]
    forecasts: list[ForecastScore]


class ForecastAccuracyPublic(BaseModel):
    now_s: int
    series: list[SeriesAccuracy]


class AutoscalingBudget(BaseModel):
    budget_usd_day: float | None
    price_usd_per_replica_h: float
    spend_usd_day: float
    bound: bool
    exceeded: bool
    degrade: str | None


class AutoscalingDecision(BaseModel):
    workload_id: str
    version: int
    min: int
    max: int
    target_rps: float
    slo_s: float | None = None
    max_concurrency: int | None = None
    current_replicas: int
    desired_replicas: int
    reason: str
    forecast_rps: float
    budget: AutoscalingBudget
