"""Shadow replays of procurement rules on the observed demand: which rule would have cost the least so far.

gpufleet's procurer (:class:`gpufleet.control.procurement.ForecastLedProcurer`) hedges its forecast by its own
measured error with a :class:`ShadowBook`: the forecast-led rule and the simple rules (all on-demand, reserve-peak,
lookback median, online break-even; :mod:`gpufleet.procure.policies`) each keep their own commitments, decided every
``step_h`` hours of the observed hourly demand as the replay decides them, and their realised cost (reserved hours
paid plus the overflow priced tier by tier, the replay's cost model :func:`hour_costs_usd`) is tracked as each hour
is observed. That running cost is the decision-relevant measure of the forecast's calibration and error: a forecast
too wide or too narrow, biased or late shows up as over- or under-commitment cost.

The first ``forecast_rules`` rules are forecast rules (the procurer's weekly profile and fresh-days rule): the
*forecast rule* is ``forecast_prior`` until ``forecast_evidence_h`` observed hours, then the cheapest of them (leaving
the current one only for one cheaper by ``forecast_margin`` of its cost; ``margin`` when None). The *leader* is the
forecast rule unless another rule is cheaper than the current leader by more than ``margin`` (a share of the forecast
rule's cost so far); the lead changes only at a step and only after
``min_history_h`` observed hours (before that the leader is ``prior``). Realised cost says little while the
commitments it prices are young (a rule that buys ahead of growth pays for idle hours first and is repaid later in
the term), so until ``evidence_h`` observed hours (the procurer sets a share of the term) the forecast rule leads. Before
session 19 the procurer capped its commitment at the leader's capacity (a leaner leader lowered it; a fuller one
never raised it above the forecast-led rule's); since then, after ``evidence_h`` hours, it holds the least capacity
of :meth:`ShadowBook.cheaper_rules` (above the forecast rule's only within what they held, :meth:`held_at_least`).

Everything here is a function of the observed history: the book is advanced over the new hours when the history
it saw is a prefix of the new one, and rebuilt otherwise (a memo, never a second source of truth).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from gpufleet.procure.replay import ReplayConfig, ReservationPolicy, overflow_tiers

FloatArray = npt.NDArray[np.float64]


def hour_costs_usd(cfg: ReplayConfig, demand_gpus: FloatArray, reserved_gpus: FloatArray) -> FloatArray:
    """Cost of each hour in the replay's model: reserved capacity paid, the overflow through the tiers."""
    d = np.asarray(demand_gpus, dtype=np.float64)
    r = np.asarray(reserved_gpus, dtype=np.float64)
    left = np.maximum(d - r, 0.0)
    cost = r * cfg.reserved_usd_per_gpu_h
    for _, price, cap in overflow_tiers(cfg, d):
        take = np.minimum(left, cap)
        cost = cost + take * price
        left = left - take
    return np.asarray(cost, dtype=np.float64)


@dataclass(slots=True)
class ShadowBook:
    """The rules' shadow commitments and realised costs over one observed hourly history (module docstring)."""

    cfg: ReplayConfig
    rules: list[ReservationPolicy]  # rule 0: the forecast rule
    step_h: int = 24
    margin: float = 0.01
    min_history_h: int = 48
    prior: str = "lookback_p50"
    evidence_h: int = 0  # the lead leaves the forecast rule only after this many observed hours
    forecast_rules: int = 1  # rules[:forecast_rules] are forecast rules; the cheapest of them is the forecast rule
    forecast_prior: int = 0  # the forecast rule until ``forecast_evidence_h`` observed hours
    forecast_evidence_h: int = 0
    forecast_margin: float | None = None  # hysteresis between the forecast rules (None: ``margin``)
    seen_: FloatArray = field(default_factory=lambda: np.zeros(0))
    caps_: FloatArray = field(default_factory=lambda: np.zeros((0, 0)))
    costs_: FloatArray = field(default_factory=lambda: np.zeros(0))
    next_decide_: int = 0
    leader_: int = 0
    forecast_: int = 0

    def __post_init__(self) -> None:
        names = [r.name for r in self.rules]
        self.forecast_ = self.forecast_prior if 0 <= self.forecast_prior < self.forecast_rules else 0
        self.leader_ = names.index(self.prior) if self.prior in names else self.forecast_
        self.costs_ = np.zeros(len(self.rules))
        self.caps_ = np.zeros((len(self.rules), self.cfg.lead_h + self.cfg.term_h + 1))

    @property
    def names(self) -> list[str]:
        return [r.name for r in self.rules]

    def extends(self, history: FloatArray) -> bool:
        """True when the history this book has seen is a prefix of ``history`` (so it can be advanced)."""
        n = len(self.seen_)
        return len(history) >= n and bool(np.array_equal(history[:n], self.seen_))

    def capacity_at(self, rule: str, hour: int) -> float:
        """The shadow capacity of ``rule`` active at ``hour`` (from the decisions made so far)."""
        i = self.names.index(rule)
        return float(self.caps_[i, hour]) if hour < self.caps_.shape[1] else 0.0

    def cheaper_rules(self) -> list[int]:
        """The simple rules whose realised cost so far is below the followed forecast rule's by more than ``margin``
        of it (no hysteresis: recomputed at every call)."""
        c, f = self.costs_, self.forecast_
        return [i for i in range(self.forecast_rules, len(self.rules)) if c[i] < (1 - self.margin) * c[f]]

    def held_at_least(self, rule: int, lo: int, hi: int) -> float:
        """The least shadow capacity of rule ``rule`` over the hours ``[lo, hi)`` (what its realised cost there was
        paid at; 0 over an empty span)."""
        span = self.caps_[rule, max(lo, 0) : max(hi, 0)]
        return float(span.min()) if len(span) else 0.0

    @property
    def leader(self) -> str:
        return self.rules[self.leader_].name

    @property
    def forecast_rule(self) -> str:
        """The forecast rule followed: the cheapest forecast rule so far (with the margin's hysteresis)."""
        return self.rules[self.forecast_].name

    def advance(self, history: FloatArray) -> None:
        """Decide every step up to ``len(history)`` and price the newly observed hours (``history`` must extend
        what was seen: :meth:`extends`)."""
        h = np.asarray(history, dtype=np.float64)
        t_end = len(h)
        span = self.cfg.lead_h + self.cfg.term_h
        if self.caps_.shape[1] < t_end + span + 1:
            bigger = np.zeros((len(self.rules), max(t_end + span + 1, 2 * self.caps_.shape[1])))
            bigger[:, : self.caps_.shape[1]] = self.caps_
            self.caps_ = bigger
        last = len(self.seen_)
        while self.next_decide_ <= t_end:
            s = self.next_decide_
            self._price(h, last, s)
            last = max(last, s)
            self._lead(s)
            for i, rule in enumerate(self.rules):
                r = float(rule.decide(s, h[:s], self.caps_[i, s : s + span], self.cfg))
                if r > 0:
                    self.caps_[i, s + self.cfg.lead_h : s + span] += float(math.ceil(r - 1e-9))
            self.next_decide_ += self.step_h
        self._price(h, last, t_end)
        self.seen_ = h.copy()

    def _price(self, h: FloatArray, lo: int, hi: int) -> None:
        if hi <= lo:
            return
        for i in range(len(self.rules)):
            self.costs_[i] += float(hour_costs_usd(self.cfg, h[lo:hi], self.caps_[i, lo:hi]).sum())

    def _lead(self, t: int) -> None:
        """The leaders at a step. The forecast rule: the prior one until ``forecast_evidence_h`` observed hours, then
        the cheapest forecast rule (leaving the current one only for one cheaper by the forecast margin). The leader: the
        forecast rule unless a simple rule is cheaper than the current leader by the margin (a share of the forecast
        rule's cost so far)."""
        if t < self.min_history_h:
            return
        costs = self.costs_
        k, f = self.forecast_rules, self.forecast_
        if t >= self.forecast_evidence_h and k > 1:
            best_f = int(np.argmin(costs[:k]))
            fm = self.margin if self.forecast_margin is None else self.forecast_margin
            if costs[best_f] < costs[f] - fm * costs[f]:
                self.forecast_ = f = best_f
        if t < self.evidence_h or self.leader_ < k:
            self.leader_ = f
            if t < self.evidence_h:
                return
        others = np.concatenate([costs[f : f + 1], costs[k:]])
        best = int(np.argmin(others))
        best = f if best == 0 else k + best - 1
        if best == f and costs[f] <= costs[self.leader_]:
            self.leader_ = f
        elif costs[best] < costs[self.leader_] - self.margin * costs[f]:
            self.leader_ = best
