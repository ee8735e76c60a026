"""Procurement that hedges by its own measured error: follow the forecast policy while it is the cheapest, fall
back to the best simple rule where it is not.

:class:`HedgedPolicy` runs gpufleet's forecast policy (:class:`~gpufleet.procure.policies.GpufleetReservationPolicy`) and
the simple rules (all on-demand, reserve-peak, lookback p50, online break-even) *in shadow*: each shadow keeps
its own commitments, decided hour by hour on the same observed demand, and its realised cost (reserved hours
paid so far plus the overflow priced tier by tier, the replay's own cost model) is tracked as each hour's demand
is observed. That running cost is the decision-relevant measure of the forecast's calibration and error: a
forecast whose scenarios are too wide or too narrow, biased or late shows up as over- or under-commitment cost.

Each hour the policy tops its own committed capacity at the activation hour up to the lower of the forecast
policy's capacity and the capacity of the *leader*:
the shadow with the lowest realised cost, where another rule must be cheaper than the forecast policy by more
than ``margin`` (a share of the forecast policy's cost so far, default 1%) before it leads, and the lead only
changes after ``min_history_h`` observed hours (default two days; before that the leader is ``prior``, the
lookback-median rule, so the first days' commitments are the lower of the forecast's and the median rule's:
with one day the forecast policy's cold-start commitments on Alibaba SD were already made, 1.037x vs 1.002x
hindsight for all-on-demand on model M0004; with two days 1.0017x). The hedge only ever lowers commitments (a
leader that would commit more than the forecast policy is followed up to the forecast policy's capacity): the
first version followed fuller leaders too and, on spiky series, a rule whose early hours looked cheap
(reserve-peak before its peaks arrived) led it to commit 2-3x the hindsight cost (docs/benchmarks/generalize.md).
While the forecast policy leads, its commitments are reproduced exactly; commitments cannot be undone, so after a
switch to a leaner rule the excess capacity runs out with its term. The reason of every hour is kept (``reasons_``: leader per hour,
``:idle_gate`` when the idle gate capped it).

The idle gate acts before any rule's commitment has been priced, from the first hour: on a series whose hours are mostly idle
(Alibaba SD: the break-even quantile of hourly demand is 0) no commitment would have paid on what was observed, and a choice
among rules by realised cost cannot see that until the first commitments have run for a lead time
(docs/benchmarks/generalize.md, "why the 11 rows fail"). While the gate acts, online break-even's capacity is the floor
(``idle_floor``): the few GPUs whose on-demand spend over the past term has already paid for a reservation are kept.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from gpufleet.procure.policies import GpufleetReservationPolicy, baseline_policies
from gpufleet.procure.replay import ReplayConfig, ReservationPolicy, overflow_tiers

FloatArray = npt.NDArray[np.float64]


def hour_cost_usd(cfg: ReplayConfig, demand_gpus: float, reserved_gpus: float) -> float:
    """Cost of one hour in the replay's model: reserved capacity paid, overflow through the tiers."""
    left = max(demand_gpus - reserved_gpus, 0.0)
    cost = reserved_gpus * cfg.reserved_usd_per_gpu_h
    if left <= 0:
        return cost
    for _, price, cap in overflow_tiers(cfg, np.array([demand_gpus])):
        take = min(left, float(cap[0]))
        cost += take * price
        left -= take
        if left <= 0:
            break
    return cost


@dataclass(slots=True)
class _Shadow:
    policy: ReservationPolicy
    cap: FloatArray = field(default_factory=lambda: np.zeros(0))
    cost_usd: float = 0.0

    def grow(self, n: int) -> None:
        if len(self.cap) < n:
            bigger = np.zeros(max(n, 2 * len(self.cap)))
            bigger[: len(self.cap)] = self.cap
            self.cap = bigger


def default_experts() -> list[ReservationPolicy]:
    """The forecast policy first (it leads until another is measurably cheaper), then the simple rules."""
    return [GpufleetReservationPolicy(), *baseline_policies()]  # type: ignore[list-item]


@dataclass(slots=True)
class HedgedPolicy:
    """gpufleet's procurement policy (see module docstring). ``experts`` builds fresh shadows per replay."""

    name: str = "gpufleet"
    margin: float = 0.01
    min_history_h: int = 48
    prior: str = "lookback_p50"  # followed (capped by the forecast policy) until min_history_h hours are observed
    experts: Callable[[], list[ReservationPolicy]] = default_experts
    # idle gate (issue 21): where the break-even quantile (1 - alpha) of the last ``idle_lookback_h`` hours of
    # demand is below ``idle_gate`` x their mean (most hours at or near zero: a reserved GPU would have sat idle
    # more often than the break-even allows), hold at most that quantile. None = off. Chosen leave-one-trace-out
    # among 0.1, 0.3, 0.5, 0.7 and off (docs/benchmarks/generalize.md).
    idle_gate: float | None = 0.5
    idle_lookback_h: int = 30 * 24
    # while the gate acts, hold at least this rule's capacity (never more than the forecast policy's): online
    # break-even commits a level only once its on-demand spend over the past term would have paid for it, so on a
    # mostly idle series it keeps the few GPUs that observed demand has already justified. None = the gate's cap alone.
    idle_floor: str | None = "online_breakeven"
    shadows_: list[_Shadow] = field(default_factory=list)
    next_decide_: int = 0
    next_cost_: int = 0
    leader_: int = 0
    reasons_: list[str] = field(default_factory=list)

    def _reset(self) -> None:
        self.shadows_ = [_Shadow(p) for p in self.experts()]
        self.next_decide_ = self.next_cost_ = 0
        names = [sh.policy.name for sh in self.shadows_]
        self.leader_ = names.index(self.prior) if self.prior in names else 0
        self.reasons_ = []

    def decide(self, t: int, history: FloatArray, committed: FloatArray, cfg: ReplayConfig) -> float:
        if t == 0 or not self.shadows_ or t < self.next_decide_ - 1:
            self._reset()
        span = cfg.lead_h + cfg.term_h
        while self.next_decide_ <= t:
            s = self.next_decide_
            for sh in self.shadows_:
                sh.grow(s + span + 1)
                r = float(sh.policy.decide(s, history[:s], sh.cap[s : s + span], cfg))
                if r > 0:
                    sh.cap[s + cfg.lead_h : s + span] += float(math.ceil(r - 1e-9))
            self.next_decide_ += 1
        while self.next_cost_ < t:
            s = self.next_cost_
            d = float(history[s])
            for sh in self.shadows_:
                sh.cost_usd += hour_cost_usd(cfg, d, float(sh.cap[s]))
            self.next_cost_ += 1
        self.leader_ = self._leader(t)
        self.reasons_.append(self.shadows_[self.leader_].policy.name)
        # downside hedge: a leaner leader lowers the target; a fuller one never raises it above the forecast's
        target = min(
            float(self.shadows_[self.leader_].cap[t + cfg.lead_h]), float(self.shadows_[0].cap[t + cfg.lead_h])
        )
        if self.idle_gate is not None and t > 0:
            recent = history[max(t - self.idle_lookback_h, 0) : t]
            level = float(np.quantile(recent, 1.0 - cfg.alpha))
            if level < self.idle_gate * float(recent.mean()):
                if self.idle_floor is not None:
                    names = [sh.policy.name for sh in self.shadows_]
                    floor = float(self.shadows_[names.index(self.idle_floor)].cap[t + cfg.lead_h])
                    target = min(float(self.shadows_[0].cap[t + cfg.lead_h]), max(level, floor))
                else:
                    target = min(target, level)
                self.reasons_[-1] += ":idle_gate"
        return max(math.floor(target + 1e-9) - float(committed[cfg.lead_h]), 0.0)

    def _leader(self, t: int) -> int:
        """Index of the shadow to follow: the forecast policy unless a rule is cheaper by more than ``margin``."""
        if t < self.min_history_h:
            return self.leader_
        base = self.shadows_[0].cost_usd
        costs = [sh.cost_usd for sh in self.shadows_]
        best = min(range(len(costs)), key=lambda i: (costs[i], i))
        current = self.leader_
        if best == 0 and costs[0] <= costs[current]:
            return 0
        # hysteresis both ways: leave the current leader only for one cheaper by the margin
        ref = costs[current]
        if costs[best] < ref - self.margin * base:
            return best
        return current
