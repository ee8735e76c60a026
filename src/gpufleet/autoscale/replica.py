"""The gpufleet replica autoscaler: predictive pre-warm, queue drain, cold-start-aware scale to zero, budget.

Contract of :meth:`PredictiveReplicaAutoscaler.decide`: the returned ``desired`` is always within
``[min_replicas, max_replicas]``; it is 0 only when ``min_replicas == 0``, no request is held or arriving, and
the cold-start-aware rule says zero pays; a budget cap that changes the decision is always reported
(``budget_bound``), and spend above the budget only happens to honour ``min_replicas`` (``budget_exceeded``).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Literal

from gpufleet.autoscale.burst_hold import BurstFloor
from gpufleet.autoscale.erlang import servers_for
from gpufleet.autoscale.forecaster import LoadForecaster, OnlineQuantileForecaster
from gpufleet.autoscale.policy_base import RatePolicy
from gpufleet.autoscale.static_fleet import StaticFleetEstimate
from gpufleet.domain.errors import ValidationError
from gpufleet.domain.workloads import ServingScaling
from gpufleet.ports import ReplicaDecision, ReplicaSignals

Metric = Literal["rps", "concurrency", "queue_depth"]


_SIZING_CAP = float(2**62)  # replicas: far past any max_replicas, which every decision is clamped to


def _bounded(raw: float) -> float:
    """A sizing as a finite count: a load that overflows (a rate of 1e9 over a stored target of 1e-300 is inf
    replicas, inf/inf is NaN) means every replica, which the caller clamps to ``max_replicas``."""
    return raw if raw < _SIZING_CAP else _SIZING_CAP


@dataclass(frozen=True, slots=True)
class BudgetDegrade:
    """A declared cheaper way to run when ``budget_usd_day`` binds, tried in order.

    price_factor: price per replica relative to the primary configuration (e.g. a cheaper SKU: 0.5).
    capacity_factor: load one replica of this option carries relative to the primary (e.g. 0.45).
    """

    name: str
    price_factor: float
    capacity_factor: float


@dataclass(frozen=True, slots=True)
class ReplicaAutoscalerConfig:
    """Settings of the gpufleet replica autoscaler (units in names; defaults explained in docs/autoscale.md).

    metric / target_per_replica: the load signal and how much of it one replica carries at the target
      utilization (rps per replica, concurrent requests per replica, or queued requests per replica).
    cold_start_s: lead time of a new replica; the forecast horizon is ``cold_start_s + period_s``.
    scale_up_stabilization_s: a scale-up applies the *lowest* recommendation of this window (0 = at once).
    scale_down_stabilization_s: a scale-down applies the *highest* recommendation of this window.
    drain_s: a queue of ``queue_depth`` requests asks for ``queue_depth / drain_s`` extra rps of capacity
      (at most the forecast load again: capacity launched now only arrives after a cold start).
    quantile: upper quantile of the load forecast the fleet is sized for.
    peak_headroom: the upper forecast may load replicas up to ``peak_headroom * target`` (the fleet is sized
      for the forecast's upper quantile at a hot but safe utilization, e.g. 0.8 * 1.2 = 96%, instead of for
      the current load at the target utilization: the forecast, not a fixed margin, provides the headroom).
      It is also the forecaster's warm-up ratio: until the forecast's own errors are measured (its first 30
      buckets) the upper forecast is ``peak_headroom`` times the level, so the fleet is the level at the target
      utilization, the reactive baseline's sizing, and claims no headroom it has not measured a need for.
    scale_down_deadband: scale down only when the recommendation is at least this fraction (and one replica)
      below the current fleet: a flap of one replica costs a whole cold start.
    size_on_level: also keep ``level / target`` replicas (the reactive target-tracking floor); off by default.
    zero_idle_s: scale to zero only after this long without any arrival.
    slo_breach_cost_usd: cost assigned to one request that misses its latency SLO (scale-to-zero rule).
    price_usd_per_replica_h: replica price, for the scale-to-zero rule and the budget.
    budget_usd_day: cap on spend per day (None = no cap); degrade_options are tried in order when it binds.
    slo_s: the latency SLO on queue wait; when set, the burst floor (autoscale/burst_hold.py) keeps the replicas
      that the recent bursts needed to meet it (None: no burst floor).
    burst_memory_cold_starts: the burst floor forgets a burst after this many cold starts.
    burst_quantile: request-weighted quantile of the recent per-period requirement the floor holds.
    forecast_bucket_s: bucket of the load forecaster; None = 60 s with the burst floor (the floor covers the
      sub-minute bursts; the forecast pre-warms for the minute-scale load a cold start can act on), else 10 s.
    react_periods: the fleet reacts to the current load only once it has lasted this many periods (the lowest
      of their values); None = 2 with the burst floor (a shorter spike is over long before a cold start ends,
      and the floor, not a launch, serves it), else 1.
    burst_net_own_work: opt-in (off): the burst floor takes one mean request's own work off each interval
      (a request waits for the work ahead of it, not its own).
    zero_miss_budget: scale to zero only while the requests that arrived with no replica ready are at most this
      share of all requests seen (an error budget for cold starts from zero; 0.005 = half of what a 99% SLO
      allows; None = off). Adopted after the held-out SD check (docs/benchmarks/autoscale.md).
    max_concurrency: the most requests one replica serves at once, when the workload declares such a limit
      (Knative's containerConcurrency; 1 for an un-batched model such as image diffusion). Set, a period's burst
      floor requirement is min(most requests in flight - ``peak_concurrency``, else ``concurrency`` -, the
      batched work arithmetic + 1) / this (autoscale/burst_hold.py), and the forecast part of the fleet is also
      staffed by Erlang C (autoscale/erlang.py). None = a batching replica.
    slo_miss_budget: error budget on the SLO itself (needs ``slo_s`` and the ``slo_misses`` signal): while more
      than this share of the last ``2 / slo_miss_budget`` requests waited longer than ``slo_s`` (more than two
      misses in the last 400 at 0.005), the burst floor stops forgetting (so the fleet does not scale to zero
      either: the floor holds what those requests needed). None = off.
    wait_miss_budget: with ``max_concurrency`` and ``slo_s``: the Erlang C staffing keeps the chance that a
      request arriving at the forecaster's level (its mean rate) waits longer than ``slo_s`` within this (the same
      0.005, half of a 99% SLO's misses, as ``zero_miss_budget``).
    static_floor_budget: with ``slo_s`` and the ``slo_misses`` signal (else off): while the requests that missed the
      SLO are more than this share of all requests seen so far, the fleet holds at least the static fleet that the
      SLO needed for the traffic seen so far (autoscale/static_fleet.py: the largest hourly ``static_attainment``
      quantile of the per-period burst-floor requirement; reason ``static_floor``): a policy failing its SLO falls
      back towards static peak, never above what a static fleet sized on the traffic seen would hold (up to the
      requirement arithmetic's error). 0.005 (half the misses a 99% SLO allows, the value of the other error
      budgets), counted over ``static_floor_window`` requests: the setting ``gpufleet bench generalize`` picks
      leave-one-trace-out among four (docs/benchmarks/generalize.md says on which traces). None = off.
    static_floor_cap: the burst floor never exceeds that same static estimate (the floor holds what the bursts
      needed, but never more than a fixed fleet that meets the SLO on every hour seen would hold). Off by default.
    static_attainment: the per-hour attainment the static estimate is sized for (0.99: static peak's).
    static_floor_window: the static floor's budget counts the misses among the last this many requests (the periods
      holding at least them) instead of all requests seen; None = all. 20,000 = 100 / 0.005 (100 misses' worth of
      budget): weeks of a sparse trace (SD: 17 days), minutes of a busy one (ServeGen: 1-7 min), so a busy fleet that
      misses at a step change does not hold its daily peak for days. Set by judgment after the cumulative budget's
      table, chosen leave-one-trace-out with it (docs/benchmarks/generalize.md).
    static_memory_hours: the static estimate is the static fleet of the hours of the last this many hours (and the
      current one); None = every hour seen. 168 (a week, the forecaster's seasonal memory): a fleet whose traffic
      has fallen since its busiest hours falls back, while it misses its SLO, to the fleet of its recent traffic,
      not to that of a launch months ago (docs/autoscale.md, "Static floor"; measured in session 35).
    """

    min_replicas: int
    max_replicas: int
    target_per_replica: float
    cold_start_s: float
    metric: Metric = "rps"
    period_s: float = 5.0
    scale_up_stabilization_s: float = 0.0
    scale_down_stabilization_s: float = 60.0
    drain_s: float = 60.0
    quantile: float = 0.98
    peak_headroom: float = 1.2
    size_on_level: bool = False
    scale_down_deadband: float = 0.0
    zero_idle_s: float = 60.0
    slo_breach_cost_usd: float = 0.01
    price_usd_per_replica_h: float = 27.52
    budget_usd_day: float | None = None
    degrade_options: tuple[BudgetDegrade, ...] = field(default_factory=tuple)
    slo_s: float | None = None
    burst_memory_cold_starts: float = 10.0
    burst_quantile: float = 0.995
    forecast_bucket_s: float | None = None
    react_periods: int | None = None
    burst_net_own_work: bool = False
    zero_miss_budget: float | None = 0.005
    max_concurrency: int | None = None
    wait_miss_budget: float = 0.005
    slo_miss_budget: float | None = 0.005
    static_floor_budget: float | None = 0.005
    static_floor_cap: bool = False
    static_attainment: float = 0.99
    static_floor_window: float | None = 20_000.0
    static_memory_hours: int | None = 168

    def __post_init__(self) -> None:
        if self.min_replicas < 0 or self.max_replicas < max(1, self.min_replicas):
            raise ValidationError("max_replicas", "need 0 <= min_replicas <= max_replicas and max_replicas >= 1")
        if self.target_per_replica <= 0:
            raise ValidationError("target_per_replica", f"must be > 0, got {self.target_per_replica}")
        if self.cold_start_s < 0 or self.period_s <= 0:
            raise ValidationError("cold_start_s", "cold_start_s must be >= 0 and period_s > 0")
        if self.react_periods is not None and self.react_periods < 1:
            raise ValidationError("react_periods", f"must be >= 1, got {self.react_periods}")
        if self.zero_miss_budget is not None and not 0.0 <= self.zero_miss_budget <= 1.0:
            raise ValidationError("zero_miss_budget", f"must be in [0, 1], got {self.zero_miss_budget}")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise ValidationError("max_concurrency", f"must be >= 1, got {self.max_concurrency}")
        if self.slo_miss_budget is not None and not 0.0 < self.slo_miss_budget < 1.0:
            raise ValidationError("slo_miss_budget", f"must be in (0, 1), got {self.slo_miss_budget}")
        if not 0.0 < self.wait_miss_budget < 1.0:
            raise ValidationError("wait_miss_budget", f"must be in (0, 1), got {self.wait_miss_budget}")
        if self.static_floor_budget is not None and not 0.0 <= self.static_floor_budget < 1.0:
            raise ValidationError("static_floor_budget", f"must be in [0, 1), got {self.static_floor_budget}")
        if self.static_floor_window is not None and not self.static_floor_window > 0:
            raise ValidationError("static_floor_window", f"must be > 0 requests, got {self.static_floor_window}")
        if self.static_memory_hours is not None and self.static_memory_hours < 1:
            raise ValidationError("static_memory_hours", f"must be >= 1 hour or None, got {self.static_memory_hours}")
        if self.budget_usd_day is not None and self.budget_usd_day < 0:
            raise ValidationError("budget_usd_day", f"must be >= 0, got {self.budget_usd_day}")


class PredictiveReplicaAutoscaler(RatePolicy):
    """The ``gpufleet`` replica policy for one fleet, configured by ``config`` (the ``scaling`` argument of the
    port's ``decide`` is not read: the config holds the fleet's settings). Stateful only through its forecaster,
    floors and stabilization windows. :class:`gpufleet.autoscale.loop_adapters.PredictiveReplicas` runs one per
    fleet, configured from each fleet's ``ServingScaling``: that is the object the control loop and the bench hold.
    """

    name = "gpufleet"

    def __init__(self, config: ReplicaAutoscalerConfig, forecaster: LoadForecaster | None = None) -> None:
        self.config = config
        self.period_s = config.period_s
        self.forecaster: LoadForecaster = forecaster or OnlineQuantileForecaster(
            horizon_s=config.cold_start_s + config.period_s,
            floor=config.target_per_replica,
            quantile=config.quantile,
            bucket_s=config.forecast_bucket_s or (60.0 if config.slo_s is not None else 10.0),
            warmup_ratio=config.peak_headroom,
        )
        self._recs: deque[tuple[float, int]] = deque()
        self._last_arrival_s: float | None = None
        react = config.react_periods or (2 if config.slo_s is not None else 1)
        self._recent_values: deque[float] = deque(maxlen=react)
        self._burst: BurstFloor | None = None
        if config.slo_s is not None:
            self._burst = BurstFloor(
                slo_s=config.slo_s,
                memory_s=max(config.period_s, config.burst_memory_cold_starts * config.cold_start_s),
                quantile=config.burst_quantile,
                net_own_work=config.burst_net_own_work,
            )
        self._static: StaticFleetEstimate | None = None
        if config.slo_s is not None and (config.static_floor_budget is not None or config.static_floor_cap):
            self._static = StaticFleetEstimate(
                attainment=config.static_attainment, memory_hours=config.static_memory_hours
            )
        self._misses_seen = 0.0  # SLO misses reported since the start (the static floor's error budget)
        # the static floor's window: (requests, misses) of the periods holding the last static_floor_window requests
        self._sf_win: deque[tuple[float, float]] = deque()
        self._sf_req = 0.0
        self._sf_miss = 0.0
        self._requests_seen = 0.0
        self._work_seen_s = 0.0  # replica-seconds of the requests seen (their mean service time, exclusive)
        self._held_at_zero = 0.0  # requests that arrived while no replica was ready
        # the error budget's window: (time, requests, SLO misses) of the periods holding the last requests
        self._slo_win: deque[tuple[float, float, float]] = deque()
        self._slo_req = 0.0
        self._slo_miss = 0.0

    def _metric_value(self, s: ReplicaSignals) -> float:
        m = self.config.metric
        if m == "rps":
            return s.arrival_rps
        if m == "concurrency":
            return s.concurrency
        return float(s.queue_depth)

    def decide(self, signals: ReplicaSignals, scaling: ServingScaling | None = None) -> ReplicaDecision:
        c = self.config
        s = signals
        value = self._metric_value(s)
        self.forecaster.observe(s.now_s, value, s.period_s)
        if s.arrival_rps > 0 or s.queue_depth > 0 or self._last_arrival_s is None:
            self._last_arrival_s = s.now_s
        self._requests_seen += s.arrival_rps * s.period_s
        self._work_seen_s += s.load_replicas * s.period_s
        if s.ready == 0:
            self._held_at_zero += s.arrival_rps * s.period_s
        upper = self.forecaster.upper()
        hot = c.target_per_replica * c.peak_headroom
        self._recent_values.append(value)
        fc = max(upper, min(self._recent_values))
        raw = max(fc / hot, self.forecaster.level() / c.target_per_replica if c.size_on_level else 0.0)
        reason = "forecast_prewarm" if upper > value else "current_load"
        if c.max_concurrency is not None and c.slo_s is not None and c.metric == "rps":
            raw = max(raw, self._staffed(self.forecaster.level()))
        if self._burst is not None:
            self._burst.keep_all = self._budget_burning(s)
            floor, static_floor = self._burst_floor(s)
            if floor > raw:
                raw, reason = floor, "burst_floor"
            if static_floor > raw:
                raw, reason = static_floor, "static_floor"
        if c.metric == "rps" and s.queue_depth > 0:
            extra = self._drain_extra(s, fc, hot)
            if extra > 0:
                raw += extra
                reason = "queue_drain"
        rec = math.ceil(_bounded(raw) - 1e-9)
        desired = self._stabilize(s.now_s, rec, s.total)
        if desired < rec:
            reason = "scale_up_stabilized"
        elif desired > rec and desired <= s.total:
            reason = "scale_down_stabilized"
        if desired == 0:
            desired, reason = self._zero_rule(s)
        if (s.queue_depth > 0 or s.arrival_rps > 0) and desired < 1:
            desired, reason = 1, "activate_held_requests"
        if desired > c.max_replicas:
            desired, reason = c.max_replicas, "clamped_max"
        if desired < c.min_replicas:
            desired, reason = c.min_replicas, "clamped_min"
        return self._apply_budget(desired, reason, fc)

    def react(self, signals: ReplicaSignals, scaling: ServingScaling | None = None) -> ReplicaDecision | None:
        """The fast path between two ``decide`` calls (the world saw the queue grow; the port's ``react``): scale
        up, never down, to the observed load at the hot utilization ``decide`` sizes for (Erlang C staffing for
        one-request replicas), plus what drains the queue within ``drain_s`` once the new replicas are ready
        (:meth:`_drain_extra`), within ``max_replicas`` and the budget. Reads the config and what ``decide``
        learnt (the service time); changes nothing: the forecaster, floors and windows learn only from ``decide``.
        Reason ``queue_growth``; None when the fleet (ready and starting) already covers that."""
        c = self.config
        s = signals
        value = self._metric_value(s)
        hot = c.target_per_replica * c.peak_headroom
        raw = value / hot
        if c.max_concurrency is not None and c.slo_s is not None and c.metric == "rps":
            raw = max(raw, self._staffed(value))
        if c.metric == "rps" and s.queue_depth > 0:
            raw += self._drain_extra(s, value, hot)
        desired = min(c.max_replicas, max(c.min_replicas, math.ceil(_bounded(raw) - 1e-9)))
        if desired <= s.total:
            return None
        d = self._apply_budget(desired, "queue_growth", value)
        return d if d.desired > s.total else None

    def _budget_burning(self, s: ReplicaSignals) -> bool:
        """True while the SLO misses among the last ``2 / slo_miss_budget`` requests exceed the budget."""
        b = self.config.slo_miss_budget
        if b is None or s.slo_misses is None:
            return False
        reqs = s.arrival_rps * s.period_s
        if reqs > 0 or s.slo_misses > 0:
            self._slo_win.append((s.now_s, reqs, s.slo_misses))
            self._slo_req += reqs
            self._slo_miss += s.slo_misses
        n = 2.0 / b
        while self._slo_win and self._slo_req - self._slo_win[0][1] >= n:
            _, r, m = self._slo_win.popleft()
            self._slo_req -= r
            self._slo_miss -= m
        return self._slo_miss > b * max(self._slo_req, n) + 1e-9

    def _staffed(self, rate_rps: float) -> float:
        """Replicas (of ``max_concurrency`` one-request servers) that Erlang C staffs for ``rate_rps``; past
        ``max_replicas`` the staffing stops counting (more than the fleet may hold: the decision is clamped to it)."""
        c = self.config
        assert c.max_concurrency is not None and c.slo_s is not None
        if self._requests_seen <= 0 or self._work_seen_s <= 0:
            return 0.0
        service_s = self._work_seen_s / self._requests_seen
        limit = c.max_replicas * c.max_concurrency + 1
        slots = servers_for(rate_rps * service_s, c.slo_s, service_s, c.wait_miss_budget, limit)
        return slots / c.max_concurrency

    def _burst_floor(self, s: ReplicaSignals) -> tuple[float, float]:
        """Observe the period in the burst floor; return the floor and the static floor (replicas at 100%)."""
        assert self._burst is not None
        c = self.config
        cap = c.max_concurrency
        in_flight = None
        if cap is not None:
            in_flight = s.peak_concurrency if s.peak_concurrency is not None else s.concurrency
        requests = s.arrival_rps * s.period_s
        req = self._burst.observe(
            s.now_s,
            s.period_s,
            s.load_replicas,
            requests,
            s.peak_work,
            in_flight=in_flight,
            per_replica=cap or 1,
        )
        floor = self._burst.level()
        if self._static is None:
            return floor, 0.0
        self._static.record(s.now_s, req, requests)
        misses = s.slo_misses or 0.0
        self._misses_seen += misses
        static = self._static.level(s.now_s)
        if c.static_floor_cap and static > 0:
            floor = min(floor, static)
        budget = c.static_floor_budget
        if budget is None:
            return floor, 0.0
        if c.static_floor_window is None:
            burning = self._misses_seen > budget * self._requests_seen + 1e-9
        else:
            if requests > 0 or misses > 0:
                self._sf_win.append((requests, misses))
                self._sf_req += requests
                self._sf_miss += misses
            while self._sf_win and self._sf_req - self._sf_win[0][0] >= c.static_floor_window:
                r, m = self._sf_win.popleft()
                self._sf_req -= r
                self._sf_miss -= m
            burning = self._sf_miss > budget * self._sf_req + 1e-9
        return floor, static if burning else 0.0

    def _drain_extra(self, s: ReplicaSignals, load: float, hot: float) -> float:
        """Replicas to add so the queue drains within ``drain_s`` once the launched replicas are ready.

        The starting replicas arrive within a cold start (half of one on average); until then the queue grows
        by what the ready replicas cannot serve. Only the part the whole fleet cannot drain in ``drain_s``
        asks for more replicas, so one queue is not paid for twice.
        """
        c = self.config
        grow = max(0.0, load - s.ready * hot) * c.cold_start_s / 2.0
        excess = s.total * hot - load
        need = (s.queue_depth + grow) / c.drain_s - excess
        return max(0.0, min(need, load) / hot)

    def _stabilize(self, now_s: float, rec: int, current: int) -> int:
        c = self.config
        keep_s = max(c.scale_up_stabilization_s, c.scale_down_stabilization_s)
        self._recs.append((now_s, rec))
        while self._recs and self._recs[0][0] < now_s - keep_s - 1e-9:
            self._recs.popleft()
        if rec > current:
            window = [r for t, r in self._recs if t >= now_s - c.scale_up_stabilization_s - 1e-9]
            return max(current, min(window))
        if rec < current:
            if current - rec < max(1.0, c.scale_down_deadband * current):
                return current
            window = [r for t, r in self._recs if t >= now_s - c.scale_down_stabilization_s - 1e-9]
            return min(current, max(window))
        return rec

    def _zero_rule(self, s: ReplicaSignals) -> tuple[int, str]:
        """Zero only if idle long enough and the saving beats the expected cost of the next cold start."""
        c = self.config
        if c.min_replicas > 0:
            return c.min_replicas, "clamped_min"
        idle_s = s.now_s - (self._last_arrival_s if self._last_arrival_s is not None else s.now_s)
        if idle_s < c.zero_idle_s:
            return 1, "zero_grace"
        if c.zero_miss_budget is not None and self._held_at_zero > c.zero_miss_budget * self._requests_seen + 1e-9:
            return 1, "zero_over_miss_budget"
        rate_rps = max(self.forecaster.level(), 0.0) if c.metric == "rps" else 0.0
        if rate_rps <= 0.0:
            # nothing arrived for a while: use one request per idle period seen so far as the rate estimate
            rate_rps = 1.0 / max(idle_s, 1.0)
        expected_idle_s = 1.0 / rate_rps
        saving_usd = c.price_usd_per_replica_h / 3600.0 * max(0.0, expected_idle_s - c.cold_start_s)
        breach_usd = c.slo_breach_cost_usd * (1.0 + rate_rps * c.cold_start_s)
        if saving_usd > breach_usd:
            return 0, "scale_to_zero"
        return 1, "zero_not_worth_cold_start"

    def _apply_budget(self, desired: int, reason: str, fc: float) -> ReplicaDecision:
        c = self.config
        if c.budget_usd_day is None:
            return ReplicaDecision(desired, reason, forecast=fc)
        day_per_replica = c.price_usd_per_replica_h * 24.0
        spend = desired * day_per_replica
        if spend <= c.budget_usd_day + 1e-9:
            return ReplicaDecision(desired, reason, forecast=fc, spend_usd_day=spend)
        for opt in c.degrade_options:
            n = max(c.min_replicas, math.ceil(desired / opt.capacity_factor - 1e-9))
            n = min(n, c.max_replicas)
            cost = n * day_per_replica * opt.price_factor
            if cost <= c.budget_usd_day + 1e-9 and n * opt.capacity_factor >= desired - 1e-9:
                return ReplicaDecision(
                    n, "budget_degraded", forecast=fc, budget_bound=True, degrade=opt.name, spend_usd_day=cost
                )
        cap = math.floor(c.budget_usd_day / day_per_replica + 1e-9)
        if cap >= c.min_replicas:
            n = min(desired, cap)
            return ReplicaDecision(
                n, "budget_capped", forecast=fc, budget_bound=True, spend_usd_day=n * day_per_replica
            )
        n = c.min_replicas
        return ReplicaDecision(
            n,
            "budget_exceeded_min_replicas",
            forecast=fc,
            budget_bound=True,
            budget_exceeded=True,
            spend_usd_day=n * day_per_replica,
        )
