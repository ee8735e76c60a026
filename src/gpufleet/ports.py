"""The ports of the control loop: each stage a small Protocol, and the requests and decisions it trades.

This module sits under the capability packages (they implement the Protocols) and over the domain.

The simulator and the service call these same decision functions; only the world behind them differs.
Every decision returns data (and a reason code); the caller applies it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Protocol

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


class Placer(Protocol):
    def choose(self, request: PlacementRequest, pools: Sequence[PoolState]) -> Allocation: ...


@dataclass(frozen=True, slots=True)
class ServingObservation:
    """What a serving world measured over the last control period of ``period_s`` (a gateway's counters and the
    deployment's status), for replica policies that read more than the request rate.

    ``ready`` / ``starting``: replicas serving now / still in their cold start. ``concurrency``: mean requests in
    flight (queued + in service); ``queue_depth``: requests waiting now; ``load_replicas``: replicas the arrivals
    would keep 100% busy; ``slo_misses``: requests whose queue wait passed ``slo_s`` during the period;
    ``max_concurrency``: the most requests one replica serves at once (1: one request per replica; None: a
    batching replica); ``peak_concurrency``: the most requests in flight at any instant (None: not measured).
    """

    ready: int
    starting: int
    period_s: float
    concurrency: float
    queue_depth: int
    load_replicas: float
    slo_s: float
    slo_misses: float
    max_concurrency: int | None = None
    peak_concurrency: float | None = None


class ReplicaAutoscaler(Protocol):
    """Replica count of one serving deployment. ``observed``: the queue the world measured (None when the world
    measures only the request rate); a policy that does not read it ignores it."""

    def desired(
        self,
        *,
        current: int,
        observed_rps: float,
        scaling: ServingScaling,
        now_s: int,
        last_scale_down_s: int,
        observed: ServingObservation | None = None,
    ) -> tuple[int, str]: ...


@dataclass(frozen=True, slots=True)
class IdleNode:
    """A launched (non-reserved) node with no work on it, as the cluster autoscaler sees it."""

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


@dataclass(frozen=True, slots=True)
class RunningOnLaunched:
    """Running checkpointed training that holds whole launched (billed per second) nodes of one SKU."""

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
