"""What teams do today, as decision stages of the control loop (the ``common_practice`` loop).

- :class:`QuarterlyPeakProcurer`: a quarterly capacity review that reserves for the forecast peak. At the
  first procurement epoch with a week of history, and then once per reservation term (a quarter when terms
  are three months), it takes the 95th percentile of the last four weeks of hourly demand, scales it by the
  growth seen over those weeks (last week's mean over the first week's, extrapolated to the middle of the
  term the new commitment would cover, clipped to 0.8..1.3), and holds that level for the quarter: whole nodes
  up to it above what is committed when the order lands, and, for each commitment that ends within the quarter
  (``ProcurementContext.ending_commitments``), a renewal starting when it ends, as far as the level needs it (a
  queued renewal, as cloud consoles offer). Before session 23 the review netted only what was committed when the
  order would land, so its own previous commitment, ending days after the review's lead time, counted as
  covering the next quarter and that quarter went unreserved. This is the spreadsheet plan a FinOps team makes
  each quarter: size the commitment for the busy hours, with growth, for the whole quarter.
- :class:`PeakSizedReplicas`: serving replicas sized for the peak and left alone. Once a week the count is set
  to the week's peak request rate times a 20% headroom over what one replica sustains at the SLO; between
  reviews it only grows, when traffic eats into the headroom (the on-call engineer's bump, at the next control
  period: it does not react to a queue seen growing within one).

Both are pure decision code: observations in, a decision with its reason out; time is passed in.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from gpufleet.autoscale.policy_base import RatePolicy
from gpufleet.domain.reservations import term_seconds
from gpufleet.domain.workloads import ServingScaling
from gpufleet.ports import ProcurementContext, ReplicaDecision, ReplicaSignals, ReservationProposal
from gpufleet.procure.baseline import whole_node_proposal

HOUR_S = 3600
DAY_S = 86400


@dataclass(slots=True)
class QuarterlyPeakProcurer:
    """Reserve for the forecast peak once per term (see the module docstring)."""

    percentile: float = 95.0
    lookback_h: int = 28 * 24
    min_history_h: int = 7 * 24
    growth_clip: tuple[float, float] = (0.8, 1.3)
    _last_review_s: dict[str, int] = field(default_factory=dict)

    def propose(self, ctx: ProcurementContext) -> list[ReservationProposal]:
        hist = np.asarray(ctx.demand_history_gpus, dtype=np.float64)
        hist = hist[np.isfinite(hist)]
        if len(hist) < self.min_history_h:
            return []
        term_s = term_seconds(ctx.pool.term_months or 12)
        last = self._last_review_s.get(ctx.sku_id)
        # a review every term, a day's slack for the weekly procurement grid
        if last is not None and ctx.now_s - last < term_s - DAY_S:
            return []
        self._last_review_s[ctx.sku_id] = ctx.now_s
        recent = hist[-self.lookback_h :]
        peak = float(np.percentile(recent, self.percentile))
        week = 7 * 24
        growth = 1.0
        if len(recent) >= 2 * week and float(recent[:week].mean()) > 0:
            span_h = len(recent) - week  # from the middle of the first week to the middle of the last
            per_h = (float(recent[-week:].mean()) / float(recent[:week].mean())) ** (1.0 / span_h)
            ahead_h = (ctx.pool.lead_time_s + term_s / 2) / HOUR_S + week / 2
            growth = min(max(per_h**ahead_h, self.growth_clip[0]), self.growth_clip[1])
        target = peak * growth
        why = f"quarterly_peak: p{self.percentile:g} of 28 days {peak:.0f} GPUs x growth {growth:.2f} = {target:.0f}"
        now = whole_node_proposal(
            ctx, target - ctx.committed_gpus_at_lead, f"{why}, committed {ctx.committed_gpus_at_lead}", round_up=True
        )
        return now + self._renewals(ctx, target, why, sum(p.units for p in now))

    @staticmethod
    def _renewals(ctx: ProcurementContext, target: float, why: str, bought: int) -> list[ReservationProposal]:
        """The level held through the quarter (the quarter's only review): each commitment that ends within it is
        renewed from its end, soonest first, in whole nodes, while what is left (lasting commitments, this review's
        order, the renewals so far) is below ``target``."""
        per = ctx.gpus_per_node
        level = ctx.committed_gpus_at_lead + bought - sum(u for u, _ in ctx.ending_commitments)
        out: list[ReservationProposal] = []
        for units, end_s in ctx.ending_commitments:
            nodes = min(units // per, max(0, math.ceil((target - level) / per - 1e-9)))
            if nodes <= 0:
                break
            level += nodes * per
            renew = f"{why}, renewing {units} GPUs that end on day {end_s / DAY_S:.0f}"
            out.append(
                ReservationProposal(ctx.sku_id, ctx.pool.id, nodes * per, end_s, ctx.pool.term_months or 12, renew)
            )
        return out


@dataclass(slots=True)
class _FleetPlan:
    replicas: int = 0
    next_review_s: int = 0
    window: deque[float] = field(default_factory=deque)


@dataclass(slots=True)
class PeakSizedReplicas(RatePolicy):
    """Static replicas sized for the week's peak, reviewed weekly; bumped up (never down) between reviews.
    Reads only the request rate of the signals (what a team's dashboard shows)."""

    period_s: float
    headroom: float = 1.2
    review_s: int = 7 * DAY_S
    name: str = "common_practice"
    _plans: dict[ServingScaling, _FleetPlan] = field(default_factory=dict)

    def decide(self, signals: ReplicaSignals, scaling: ServingScaling) -> ReplicaDecision:
        observed_rps, now_s = signals.arrival_rps, signals.now_s
        plan = self._plans.setdefault(scaling, _FleetPlan())
        plan.window.append(observed_rps)
        while len(plan.window) > max(1, int(self.review_s // self.period_s)):
            plan.window.popleft()

        def size(rps: float) -> int:
            want = math.ceil(rps * self.headroom / scaling.target_rps_per_replica - 1e-9)
            return max(scaling.min_replicas, min(scaling.max_replicas, want))

        reason = "static_peak_size"
        if now_s >= plan.next_review_s:
            plan.replicas = size(max(plan.window))
            plan.next_review_s = int(now_s) + self.review_s
            reason = "weekly_peak_review"
        elif size(observed_rps) > plan.replicas:  # traffic ate the headroom: the on-call bump
            plan.replicas = size(observed_rps)
            reason = "bumped_over_peak"
        return ReplicaDecision(plan.replicas, reason, forecast=observed_rps)
