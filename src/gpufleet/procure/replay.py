"""Hourly replay of a GPU demand series against a reservation policy (the ``bench procure`` model).

Model (one SKU, one region, hourly grid ``t = 0 .. T-1``):

* A commitment of ``r`` GPUs made at hour ``s`` is active on hours ``[s + lead_h, s + lead_h + term_h)``
  and is paid at ``reserved_usd_per_gpu_h`` for every active hour inside the replayed window (a window
  of an ongoing process: hours after the window are the next window's business, for every policy alike).
* Demand above active reserved capacity overflows to the pay-per-use tiers, cheapest eligible first,
  each within its capacity: spot (only the checkpointable share of demand, at most ``spot_capacity_gpus``),
  secondary (at most ``secondary_capacity_gpus``), on-demand (at most ``on_demand_quota_gpus``). What is
  left is unmet demand, priced at ``unmet_penalty_usd_per_gpu_h`` (never free).
* A policy decides at the start of each hour ``t`` seeing only demand of hours ``< t`` and the capacity
  it has already committed; it returns how many GPUs to commit now.

Every hourly overflow cost is convex piecewise linear in the overflow, so the same model is an exact LP
for the hindsight bound (:mod:`gpufleet.procure.hindsight`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt

from gpufleet.domain.errors import NotFoundError, ValidationError
from gpufleet.ports import PriceCatalog

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class ReplayConfig:
    """Prices (USD per GPU-hour), capacities (GPUs) and commitment shape (hours) of one replay."""

    term_h: int
    lead_h: int
    reserved_usd_per_gpu_h: float
    on_demand_usd_per_gpu_h: float
    spot_usd_per_gpu_h: float
    secondary_usd_per_gpu_h: float
    on_demand_quota_gpus: float = math.inf
    checkpointable_share: float = 0.0  # share of each hour's demand that may ride spot
    spot_capacity_gpus: float = 0.0
    secondary_capacity_gpus: float = 0.0
    unmet_penalty_usd_per_gpu_h: float = 0.0  # 0 = 3x on-demand (set in __post_init__)

    def __post_init__(self) -> None:
        if self.term_h <= 0:
            raise ValidationError("term_h", f"must be > 0, got {self.term_h}")
        if self.lead_h < 0:
            raise ValidationError("lead_h", f"must be >= 0, got {self.lead_h}")
        if not 0.0 <= self.checkpointable_share <= 1.0:
            raise ValidationError("checkpointable_share", f"must be in [0, 1], got {self.checkpointable_share}")
        for name in ("reserved_usd_per_gpu_h", "on_demand_usd_per_gpu_h", "spot_usd_per_gpu_h"):
            if getattr(self, name) < 0:
                raise ValidationError(name, "must be >= 0")
        for name in ("on_demand_quota_gpus", "spot_capacity_gpus", "secondary_capacity_gpus"):
            if not getattr(self, name) >= 0:  # NaN fails too; inf is "no limit"
                raise ValidationError(name, f"must be >= 0 GPUs (inf for no limit), got {getattr(self, name)}")
        if self.unmet_penalty_usd_per_gpu_h <= 0:
            object.__setattr__(self, "unmet_penalty_usd_per_gpu_h", 3.0 * self.on_demand_usd_per_gpu_h)

    @property
    def alpha(self) -> float:
        """Reserved over on-demand price: the break-even utilization of a commitment."""
        return self.reserved_usd_per_gpu_h / self.on_demand_usd_per_gpu_h

    @classmethod
    def from_catalog(cls, sku_id: str, *, prices: PriceCatalog, term_h: int, lead_h: int, **kw: float) -> ReplayConfig:
        """Prices for ``sku_id`` from the injected catalog (NotFoundError if it does not list the SKU)."""
        p = prices.list_price(sku_id)
        if p is None:
            raise NotFoundError("sku", sku_id)
        return cls(
            term_h=term_h,
            lead_h=lead_h,
            reserved_usd_per_gpu_h=float(p.reserved_1y),
            on_demand_usd_per_gpu_h=float(p.on_demand),
            spot_usd_per_gpu_h=float(p.spot),
            secondary_usd_per_gpu_h=float(p.secondary),
            **kw,
        )


def overflow_tiers(cfg: ReplayConfig, demand: FloatArray) -> list[tuple[str, float, FloatArray]]:
    """The pay-per-use tiers as ``(name, price, capacity per hour)``, cheapest first, unmet last."""
    n = len(demand)
    tiers = [
        ("spot", cfg.spot_usd_per_gpu_h, np.minimum(cfg.checkpointable_share * demand, cfg.spot_capacity_gpus)),
        ("secondary", cfg.secondary_usd_per_gpu_h, np.full(n, cfg.secondary_capacity_gpus)),
        ("on_demand", cfg.on_demand_usd_per_gpu_h, np.full(n, cfg.on_demand_quota_gpus)),
    ]
    tiers.sort(key=lambda x: x[1])
    tiers.append(("unmet", cfg.unmet_penalty_usd_per_gpu_h, np.full(n, math.inf)))
    return tiers


@dataclass(frozen=True, slots=True)
class ReplayResult:
    """What a policy cost: total and per tier (USD), GPU-hours per tier, commitments made."""

    cost_usd: float
    cost_by_tier_usd: dict[str, float]
    gpu_h_by_tier: dict[str, float]
    commits: FloatArray  # GPUs committed at each hour
    reserved_gpus: FloatArray  # active reserved capacity per hour
    unmet_gpu_h: float
    reserved_utilization: float  # used reserved GPU-h / paid reserved GPU-h
    extra: dict[str, float] = field(default_factory=dict)


def cost_of_commits(cfg: ReplayConfig, demand: FloatArray, commits: FloatArray) -> ReplayResult:
    """Exact cost of a commitment schedule (``commits[s]`` GPUs committed at hour ``s``)."""
    n = len(demand)
    cap = np.zeros(n + cfg.lead_h + cfg.term_h + 1)
    idx = np.nonzero(commits)[0]
    for s in idx:  # commitments are few; a cumulative sum of starts/ends is exact
        cap[s + cfg.lead_h] += commits[s]
        cap[s + cfg.lead_h + cfg.term_h] -= commits[s]
    reserved = np.cumsum(cap)[:n]
    return _dispatch(cfg, demand, np.asarray(commits, dtype=np.float64), reserved)


def _dispatch(cfg: ReplayConfig, demand: FloatArray, commits: FloatArray, reserved: FloatArray) -> ReplayResult:
    used_reserved = np.minimum(demand, reserved)
    left = demand - used_reserved
    cost = {"reserved": float(reserved.sum()) * cfg.reserved_usd_per_gpu_h}
    gpu_h = {"reserved": float(used_reserved.sum())}
    for name, price, capacity in overflow_tiers(cfg, demand):
        take = np.minimum(left, capacity)
        left = left - take
        gpu_h[name] = float(take.sum())
        cost[name] = gpu_h[name] * price
    paid = float(reserved.sum())
    return ReplayResult(
        cost_usd=sum(cost.values()),
        cost_by_tier_usd=cost,
        gpu_h_by_tier=gpu_h,
        commits=commits,
        reserved_gpus=reserved,
        unmet_gpu_h=gpu_h["unmet"],
        reserved_utilization=gpu_h["reserved"] / paid if paid > 0 else 0.0,
    )


class ReservationPolicy(Protocol):
    """An online policy: at hour ``t`` it sees ``history`` (demand of hours ``< t``) and ``committed``
    (capacity already committed for hours ``t .. t + lead_h + term_h - 1``) and returns GPUs to commit."""

    name: str

    def decide(self, t: int, history: FloatArray, committed: FloatArray, cfg: ReplayConfig) -> float: ...


def replay(cfg: ReplayConfig, demand: FloatArray, policy: ReservationPolicy) -> ReplayResult:
    """Run ``policy`` hour by hour over ``demand`` (GPUs per hour, NaN-free) and price the outcome."""
    d = np.asarray(demand, dtype=np.float64)
    if d.ndim != 1 or len(d) == 0:
        raise ValidationError("demand", "must be a non-empty 1-D series")
    if not np.all(np.isfinite(d)) or np.any(d < 0):
        raise ValidationError("demand", "must be finite and >= 0")
    n = len(d)
    span = cfg.lead_h + cfg.term_h
    cap = np.zeros(n + span)
    commits = np.zeros(n)
    for t in range(n):
        if t + cfg.lead_h >= n:
            break  # a commitment made now would only start after the window
        r = float(policy.decide(t, d[:t], cap[t : t + span], cfg))
        if r > 0:
            r = float(math.ceil(r - 1e-9))
            commits[t] = r
            cap[t + cfg.lead_h : t + span] += r
    return _dispatch(cfg, d, commits, cap[:n])
