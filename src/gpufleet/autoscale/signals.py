"""What a replica autoscaler sees and what it returns. Plain data, shared by every replica policy."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


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
      ``window_s`` inside the period, for a few short windows (what a gateway's per-second counters show;
      empty when the caller does not measure it).
    peak_concurrency: the most requests in flight (queued + in service) at any instant of the period (a
      gateway's in-flight gauge; None when the caller does not measure it).
    slo_misses: requests whose wait in the queue passed the latency SLO during the period (a gateway sees a
      queued request's age cross it; each request counts once; None when the caller does not measure it).
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


class ReplicaPolicy(Protocol):
    """A replica autoscaler: called every ``period_s`` with the latest signals."""

    name: str
    period_s: float

    def decide(self, signals: ReplicaSignals) -> ReplicaDecision: ...
