"""The ports of the control loop: each stage a small Protocol, and the requests and decisions it trades.

This module sits under the capability packages (they implement the Protocols) and over the domain.

The simulator and the service call these same decision functions; only the world behind them differs.
Every decision returns data (and a reason code); the caller applies it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import NamedTuple, Protocol

import numpy as np
import numpy.typing as npt

from gpufleet.domain.allocations import Allocation
from gpufleet.domain.catalog import ListPrice
from gpufleet.domain.errors import ValidationError
from gpufleet.domain.pools import CapacityPool
from gpufleet.domain.workloads import ServingScaling

FloatArray = npt.NDArray[np.float64]


class PriceCatalog(Protocol):
    """List prices per GPU-hour by SKU: the one way decision code learns a catalog price (injected, never read
    from a module global). ``list_price`` is None for a SKU the catalog does not list;
    ``reserved_to_on_demand`` is the reserved/on-demand price ratio used where only one price is known."""

    @property
    def reserved_to_on_demand(self) -> float: ...

    def list_price(self, sku_id: str) -> ListPrice | None: ...

    def sku_ids(self) -> tuple[str, ...]: ...


@dataclass(frozen=True, slots=True)
class DemandForecast:
    """A quantile forecast on a regular grid: the one forecast type of the loop and of every forecasting model.

    ``mean`` has shape ``(h,)``; ``values`` has shape ``(len(levels), h)``, one row per level. ``levels`` are
    strictly increasing in ``(0, 1)`` and quantiles never cross (``values[i, k] <= values[i + 1, k]``);
    :func:`gpufleet.forecast.quantiles.make_forecast` enforces both. ``method`` names the model that made it.
    """

    mean: FloatArray
    levels: tuple[float, ...]
    values: FloatArray
    method: str

    @property
    def horizon(self) -> int:
        return int(self.mean.shape[0])

    @property
    def quantiles(self) -> dict[float, FloatArray]:
        """Level -> forecast row (views of ``values``), in increasing level order."""
        return {q: self.values[i] for i, q in enumerate(self.levels)}

    @property
    def median(self) -> FloatArray:
        return self.at(0.5)

    def at(self, q: float) -> FloatArray:
        """The forecast of quantile ``q``; a level that was not forecast is linearly interpolated."""
        qs = np.asarray(self.levels)
        hit = np.flatnonzero(np.isclose(qs, q))
        if hit.size:
            return np.asarray(self.values[hit[0]], dtype=np.float64)
        if not qs[0] <= q <= qs[-1]:
            raise ValidationError("quantile", f"{q} is outside the forecast levels {self.levels}")
        j = int(np.searchsorted(qs, q))
        w = (q - qs[j - 1]) / (qs[j] - qs[j - 1])
        return np.asarray((1 - w) * self.values[j - 1] + w * self.values[j], dtype=np.float64)


class Forecaster(Protocol):
    """The forecasting stage: demand history (regular grid, oldest first, NaN = gap) in, ``horizon`` steps out.

    Models inside :mod:`gpufleet.forecast` share the estimator interface
    :class:`gpufleet.forecast.base.ForecastModel` (fit / predict) and return the same :class:`DemandForecast`.
    """

    def forecast(self, history: FloatArray, step_s: int, horizon: int) -> DemandForecast: ...


@dataclass(frozen=True, slots=True)
class PlannedRunRegistration:
    """A large training run a team registered ahead of time: what its user typed into the planned-run calendar
    (name, team, SKU, GPUs, start, duration and how likely it is to go ahead), never whether it will happen. The
    control plane learns that at ``start_s``: the run's pods arrive or they do not."""

    name: str
    team: str
    sku_id: str
    gpus: int
    start_s: int
    duration_s: int
    probability: float = 1.0
    registered_s: int = 0  # when the registration was made (the control plane sees it from then on)

    @property
    def end_s(self) -> int:
        return self.start_s + self.duration_s


@dataclass(frozen=True, slots=True)
class ProcurementContext:
    """What the procurer sees for one SKU-region: measured demand and the commitments already made."""

    now_s: int
    sku_id: str
    pool: CapacityPool  # the reserved pool to buy from
    demand_history_gpus: FloatArray  # hourly GPUs in use + pending, oldest first
    forecast: DemandForecast | None
    committed_gpus_at_lead: int  # reserved GPUs active (or on order) when a new order would land
    gpus_per_node: int
    term_h: int | None = None  # the term in hours where it is not the pool's whole months (bench replays' 1-week terms)
    # the planned-run calendar as registered so far (every SKU; the procurer keeps its own): control/planned_runs.py
    planned_runs: tuple[PlannedRunRegistration, ...] = ()
    # hourly GPUs the SKU's serving replicas were asked for (replicas wanted x GPUs each, placed or not), oldest
    # first; None where the caller does not observe serving (control/stockout_cover.py)
    serving_asks_gpus: FloatArray | None = None
    # the commitments counted in committed_gpus_at_lead that end before the term a commitment made now would cover
    # does, as (GPUs, end_s), soonest first: what a review renews (common practice's quarterly review); () where
    # none ends or the caller does not say
    ending_commitments: tuple[tuple[int, int], ...] = ()

    @property
    def commitment_term_h(self) -> int:
        """The term a new commitment would run for, in hours (a month is 730 hours)."""
        return self.term_h if self.term_h is not None else (self.pool.term_months or 12) * 730


@dataclass(frozen=True, slots=True)
class ReservationProposal:
    sku_id: str
    pool_id: str
    units: int
    start_s: int
    term_months: int
    reason: str


class Procurer(Protocol):
    def propose(self, ctx: ProcurementContext) -> list[ReservationProposal]: ...


@dataclass(frozen=True, slots=True)
class ApprovalDecision:
    approvals_required: int
    approver_ids: tuple[str, ...]
    approved: bool
    delay_s: int
    reason: str


class Approver(Protocol):
    def decide(self, est_cost_usd: Decimal, threshold_usd: Decimal, reservation_id: str) -> ApprovalDecision: ...


@dataclass(frozen=True, slots=True)
class PoolState:
    """What placement knows about one pool right now."""

    pool: CapacityPool
    gpus_in_use: int  # GPUs billed in this pool now (launched or committed)
    capacity_gpus: int | None  # quota or provider ceiling (None = unbounded)
    in_stock: bool


@dataclass(frozen=True, slots=True)
class PlacementRequest:
    workload_id: str
    sku_id: str
    gpus: int
    serving: bool
    checkpointable: bool
    launchable_tiers_only: bool = True  # reserved capacity is bought by procurement, not launched per pod
    gpus_per_node: int = 0  # the SKU's node size (0: unknown); a placer may then answer with fewer whole nodes


class Placer(Protocol):
    def choose(self, request: PlacementRequest, pools: Sequence[PoolState]) -> Allocation: ...


@dataclass(frozen=True, slots=True)
class ReplicaSignals:
    """One observation of a serving workload, averaged over the last decision period.

    now_s: the decision time (passed in; policies never read a clock).
    ready / starting: replicas serving now / launched and still in their cold start.
    period_s: length of the observation window these averages cover.
    arrival_rps: requests that arrived per second (including those held at zero replicas).
    concurrency: mean requests in flight (queued + in service).
    queue_depth: requests waiting for a replica at ``now_s`` (held requests when at zero replicas).
    load_replicas: replicas the arrivals would keep 100% busy (token-weighted work rate); never capped.
    peak_work: ``(window_s, work)`` pairs: the replica-seconds of work that arrived in the densest
      ``window_s`` ending inside the period (it may begin in the period before), for a few short windows (what a
      gateway's per-second counters show; empty when the caller does not measure it).
    peak_concurrency: the most requests in flight (queued + in service) at any instant of the period (a
      gateway's in-flight gauge; None when the caller does not measure it).
    slo_misses: requests whose wait in the queue passed the latency SLO during the period (a gateway sees a
      queued request's age cross it; each request counts once; None when the caller does not measure it).
    stocked_out: a pool of the workload's GPU type is out of stock now (the provider refuses launches there; the
      simulator's on-demand stock-outs, a cloud adapter's stockout signal): room let go or taken now cannot be
      had back from that pool until it returns. False when the caller does not observe it.
    """

    now_s: float
    ready: int
    starting: int
    period_s: float
    arrival_rps: float
    concurrency: float
    queue_depth: int
    load_replicas: float
    peak_work: tuple[tuple[float, float], ...] = ()
    peak_concurrency: float | None = None
    slo_misses: float | None = None
    stocked_out: bool = False

    @property
    def total(self) -> int:
        return self.ready + self.starting


@dataclass(frozen=True, slots=True)
class ReplicaDecision:
    """The replica count a policy wants, and why.

    reason: a reason code (see docs/autoscale.md), e.g. ``forecast_prewarm``, ``queue_drain``,
      ``scale_down_stabilized``, ``scale_to_zero``, ``activate_held_requests``, ``clamped_max``, ``budget_capped``.
    forecast: the load the decision provisions for (the policy's own metric), for reports.
    budget_bound: the budget cap changed the decision (always reported, never silent).
    budget_exceeded: the decision spends above ``budget_usd_day`` (only to honour ``min_replicas``).
    degrade: the declared degrade option applied because the budget binds, if any.
    spend_usd_day: the decision's spend rate, expressed per day at the chosen option's price.
    """

    desired: int
    reason: str
    forecast: float = 0.0
    budget_bound: bool = False
    budget_exceeded: bool = False
    degrade: str | None = None
    spend_usd_day: float | None = None


class ReplicaAutoscaler(Protocol):
    """The replica-policy stage: the one interface of every replica policy (gpufleet's, HPA, KPA, a static fleet).

    ``decide`` is called every ``period_s`` per serving fleet with what the world observed of it (``signals``) and
    the fleet's declared scaling (``scaling``: its min / max replicas, the rps one replica sustains, its cold start
    and scale-down delay); a policy that serves several fleets keeps one state per ``scaling``. ``desired`` is the
    same decision for a world that observes only the request rate (``current`` replicas, ready or starting, and
    ``observed_rps``): :func:`rate_signals` turns that into signals, and the decision is ``decide``'s.
    The simulator, the service's reconciler and ``gpufleet bench autoscale`` call these same objects.

    ``react`` is the fast path between two ``decide`` calls: a world that sees a fleet's queue grow (arriving work
    above its ready replicas, after a step in traffic or a lost replica) calls it once its metrics show it, with
    ``signals`` over the short window since the last call (``period_s`` is that window). It returns a decision, or
    None for no change; it must not change what ``decide`` learns (forecasts, windows, budgets), so the per-period
    path sees the same history whether or not the fast path ran. gpufleet's policy and HPA only scale up there; a
    static fleet does not react (docs/autoscale.md, "The fast path").
    """

    name: str
    period_s: float

    def decide(self, signals: ReplicaSignals, scaling: ServingScaling) -> ReplicaDecision: ...

    def react(self, signals: ReplicaSignals, scaling: ServingScaling) -> ReplicaDecision | None: ...

    def desired(
        self, *, current: int, observed_rps: float, scaling: ServingScaling, now_s: int, last_scale_down_s: int
    ) -> tuple[int, str]: ...


def rate_signals(
    current: int, observed_rps: float, scaling: ServingScaling, now_s: float, period_s: float
) -> ReplicaSignals:
    """The signals of a world that observes only the request rate: ``current`` replicas taken as ready, no queue,
    the load in replicas at 100% busy = ``observed_rps / scaling.target_rps_per_replica``."""
    if scaling.target_rps_per_replica <= 0:
        raise ValidationError("target_rps_per_replica", f"must be > 0, got {scaling.target_rps_per_replica}")
    return ReplicaSignals(
        now_s=float(now_s),
        ready=current,
        starting=0,
        period_s=float(period_s),
        arrival_rps=observed_rps,
        concurrency=0.0,
        queue_depth=0,
        load_replicas=observed_rps / scaling.target_rps_per_replica,
    )


class IdleNode(NamedTuple):
    """A launched (non-reserved) node with no work on it, as the cluster autoscaler sees it. Immutable (a named
    tuple: the simulator builds one per idle node per SKU and control period)."""

    node_id: int
    pool_id: str
    sku_id: str
    tier: str
    gpus: int
    idle_for_s: int
    up_for_s: int
    node_start_s: int
    price_usd_per_gpu_h: float


@dataclass(frozen=True, slots=True)
class ScaleDownContext:
    now_s: int
    sku_id: str
    idle: Sequence[IdleNode]
    pending_gpus: int  # queued demand for this SKU right now
    free_gpus: int  # free GPUs on schedulable nodes of this SKU (idle nodes included)
    capacity_gpus: int  # GPUs on schedulable nodes of this SKU
    forecast_gpus: FloatArray | None  # upper-quantile demand forecast for the coming hours, if any
    demand_now_gpus: float
    # price of capacity had without waiting (the SKU's on-demand pool): what a GPU-second of work waiting for a
    # relaunch is valued at; 0 = unknown (the node scaler then values it at the idle node's own price)
    wait_price_usd_per_gpu_h: float = 0.0
    # pools of this SKU out of stock right now: a node of one of them, once terminated, cannot be launched again
    # until stock returns (hours), however short its node start
    out_of_stock_pools: frozenset[str] = frozenset()
    # launched nodes of this SKU that joined since the last call without this scaler being asked for them (a world
    # where another component launches, Kubernetes' Karpenter): the SKU's need for fresh nodes; 0 where the scaler
    # decides every launch (the simulator)
    fresh_nodes: int = 0
    # GPUs of queued gangs (pods over whole nodes) that cannot complete from what is at hand: fewer whole nodes
    # free, starting and still launchable in their pools (quota, stock) than they need; reported only when every
    # queued pod of the SKU is such a gang (else 0: some queued work could take an idle node). They wait for
    # running work to free nodes; an idle node held for them saves at most a node start then. 0 = not observed
    unreachable_gang_gpus: int = 0
    # GPUs to keep free on this SKU's nodes of the tiers every job may use, all but spot (the loop's start buffer,
    # control/start_buffer.py), and the GPUs free on them now: a node of those tiers goes only while the free GPUs
    # left reach ``keep_free_gpus``; 0 = none asked
    keep_free_gpus: int = 0
    buffer_free_gpus: int = 0
    # the same for the buffer's spot lane (checkpointed training's, control/start_buffer.py): GPUs to keep free on
    # the SKU's spot nodes, and the GPUs free on them now; 0 = none asked
    keep_free_spot_gpus: int = 0
    spot_free_gpus: int = 0


def within_buffer(ctx: ScaleDownContext, releases: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """``releases`` (in the scaler's order) cut to those that leave ``ctx.keep_free_gpus`` GPUs free on the nodes
    that are not spot and ``ctx.keep_free_spot_gpus`` on spot nodes: what every node scaler returns for a context
    that asks for a buffer."""
    if (ctx.keep_free_gpus <= 0 and ctx.keep_free_spot_gpus <= 0) or not releases:
        return releases
    spot = {n.node_id: n.tier == "spot" for n in ctx.idle}
    gpus = {n.node_id: n.gpus for n in ctx.idle}
    free = {False: ctx.buffer_free_gpus, True: ctx.spot_free_gpus}
    keep = {False: ctx.keep_free_gpus, True: ctx.keep_free_spot_gpus}
    out: list[tuple[int, str]] = []
    for node_id, reason in releases:
        g, lane = gpus.get(node_id, 0), spot.get(node_id, False)
        if g and keep[lane] > 0 and free[lane] - g < keep[lane]:
            continue
        free[lane] -= g
        out.append((node_id, reason))
    return out


@dataclass(frozen=True, slots=True)
class ScaleUpContext:
    """Pending work of one SKU that no free node can take: how many whole nodes it needs, what already exists."""

    now_s: int
    sku_id: str
    need_nodes: int  # nodes the pod needs (1, or a gang's whole nodes)
    gang: bool
    free_whole_nodes: int  # fully free schedulable nodes of the SKU on tiers the pod may use
    starting_nodes: int  # launched nodes of the SKU still starting
    # busy nodes (tiers the pod may use) whose running training work reports it will end within
    # ``freeing_within_s`` (the SKU's node start time) so that the pod would fit, minus those claimed by pods
    # already waiting for them: waiting for one is no slower than launching a node, and buys nothing
    freeing_nodes: int = 0
    freeing_within_s: int = 0


class RunningOnLaunched(NamedTuple):
    """Running checkpointed training that holds whole launched (billed per second) nodes of one SKU. Immutable (a
    named tuple: the simulator builds one per candidate run per SKU and control period)."""

    pod_id: int
    gang: bool  # more than one node
    launched_nodes: int  # its whole nodes on launched tiers (on-demand, spot, secondary)
    reported_left_s: int  # the end it reports (a progress ETA, sim/freeing.py) minus now
    redo_s: int  # work since its last checkpoint: redone if it restarts now


@dataclass(frozen=True, slots=True)
class MoveContext:
    """Whole reserved nodes of one SKU sit free while training runs on launched nodes: which runs to move there.

    A move restarts the run from its last checkpoint on free reserved nodes (already paid for); its launched
    nodes go idle and face scale-down like any other.
    """

    now_s: int
    sku_id: str
    running: Sequence[RunningOnLaunched]
    reserved_idle_s: Sequence[int]  # free whole reserved nodes: how long each has been idle


class NodeScaler(Protocol):
    """The cluster autoscaler's node counts: how many nodes to launch for pending work (the placer picks the
    pool), which idle launched nodes to terminate, which runs to move from launched onto free reserved nodes,
    and why.

    ``min_idle_s``: nodes idle for less than this are never terminated, so the world does not offer them.
    """

    min_idle_s: int

    def nodes_to_launch(self, ctx: ScaleUpContext) -> int: ...

    def scale_down(self, ctx: ScaleDownContext) -> list[tuple[int, str]]: ...

    def moves(self, ctx: MoveContext) -> list[tuple[int, str]]: ...
