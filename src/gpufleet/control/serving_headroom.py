"""Serving headroom around the replica autoscaler: spare replicas, and a floor under the last day's peak.

- Spare replicas above what the autoscaler asks for, so that losing a replica (a node failure) or a step in
  traffic the forecast missed costs no requests while the replacement cold-starts: one replica, or
  ``spare_gpus`` worth of replicas where replicas are small (a 1-GPU embedding replica is cheap insurance for
  the many requests it carries; a 4-GPU 70B replica is not).
- A floor of ``peak_floor`` times the most replicas the autoscaler asked for over the last ``window_s`` (a day):
  traffic moves by steps as well as by its daily cycle (ServeGen's daily means vary by CV ~0.22, so a new day
  can open 20-40% above the last), and a fleet scaled down to the night's trough meets such a step short for a
  whole control period. Holding part of the daily peak costs some GPU-hours at night, far fewer than common
  practice's fleet sized for the week's peak plus 20%.
- A noise floor (:func:`newsvendor_z`, :meth:`SpareReplicas._noise_floor`): a control period whose rate exceeds
  the ready replicas misses most of its requests, so each fleet holds the last period's load times
  ``exp(z sigma)``, sigma the fleet's observed period-over-period noise and z the newsvendor's: the replica's price
  per period against ``breach_cost_usd`` per missed request. A fleet whose replica carries many requests per
  dollar (a 1-GPU embedding model) holds more sigmas than one whose replica is dear (a 4-GPU 70B model).
- The step pre-warm (:meth:`SpareReplicas._step_floor`) holds, at a recurring step, the larger of the largest jump
  seen and a Student-t tail of the slot's log jumps at the same newsvendor's z.
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from gpufleet.autoscale.loop_adapters import PredictiveReplicas
from gpufleet.autoscale.policy_base import RatePolicy
from gpufleet.domain.workloads import ServingScaling
from gpufleet.ports import ReplicaAutoscaler, ReplicaDecision, ReplicaSignals

MAX_LOG_JUMP = 50.0  # a step tail or jump above e^50 times the rate is "all replicas" (max_replicas) and stays finite
_MAX_JUMP = math.exp(MAX_LOG_JUMP)  # a period-over-period ratio of the rate is kept within [1 / _MAX_JUMP, _MAX_JUMP]
_MAX_COUNT = 1 << 62  # a need past any fleet (an overflowing load, inf included): ``decide`` caps it at max_replicas
_ADD = np.add.reduce  # the pairwise sum np.mean and np.std use
_TailArgs = tuple[int, float, float, float]  # what a slot's tail is computed from (:func:`_t_tail`)
# a fleet's slot tables: jumps, maxima (and sorted), sds (and sorted), tails, tail arguments, log jumps
_StepTables = tuple[
    dict[int, deque[float]],
    dict[int, float],
    list[float],
    dict[int, float],
    list[float],
    dict[int, float],
    dict[int, _TailArgs],
    dict[int, np.ndarray],
]


@dataclass(slots=True)
class SpareReplicas(RatePolicy):
    """Spare replicas and a daily-peak floor over ``inner`` (see the module docstring), through the one
    replica-policy port: ``decide`` hands ``inner`` the fleet without its spare and adds the spare back."""

    inner: ReplicaAutoscaler
    period_s: float = 900.0
    spare: int = 1
    # spare GPUs per fleet: a fleet of small replicas keeps this many GPUs of spare replicas (more than one
    # replica where replicas are small, hence cheap for the requests they carry)
    spare_gpus: int = 0
    gpus_per_replica: dict[ServingScaling, int] = field(default_factory=dict)
    peak_floor: float = 0.0  # share of the window's peak ask held as a floor (0 = none)
    window_s: int = 86400
    # step pre-warm (:meth:`_step_floor`): before a time of day whose largest period-over-period jump of the rate
    # over ``step_days`` days (J) is an outlier among the day's slots (excess J - 1 at least ``step_outlier`` times
    # the median slot's), hold ``load x J`` replicas at 100% busy for the next two periods (0 days = off)
    step_days: int = 91
    step_min_days: int = 4
    step_outlier: float = 2.0
    step_sd_outlier: bool = True
    # no scale-down at a step slot: while the step pre-warm is on, the fleet keeps at least its ready replicas (a
    # replica let go just before a step that outgrows the pre-warm is a cold start short when it comes)
    step_hold: bool = True
    # the step pre-warm of a fleet that shares its GPU type with another declared fleet, during a stock-out
    # (``ReplicaSignals.stocked_out``): sized for the median of the slot's jumps, not their largest or tail
    # (:func:`stockout_jump`; False: as in stock)
    stockout_median: bool = True
    # noise floor and step tail (:meth:`_noise_floor`, :func:`newsvendor_z`): a missed request costs this much
    # (0 = off; the replica autoscaler's ``slo_breach_cost_usd`` is 0.01); sigma is measured over ``noise_days``
    # days. On since session 10 with ``step_sd_outlier`` on and ``step_min_days`` 4 (chosen on the default
    # scenario's tuning seeds 11-16 with the serving fast path: docs/benchmarks/loop.md, session 10)
    breach_cost_usd: float = 0.01
    noise_days: int = 7
    noise_min_periods: int = 96
    noise_base_periods: int = 3
    noise_spare: bool = True  # the spare is added over the noise floor too (False: the floor is the whole fleet)
    price_usd_per_replica_h: dict[ServingScaling, float] = field(default_factory=dict)
    gpu_type: dict[ServingScaling, str] = field(default_factory=dict)  # declared per fleet (:meth:`declare_fleet`)
    name: str = "gpufleet"
    _asks: dict[ServingScaling, deque[int]] = field(default_factory=dict)
    _jumps: dict[ServingScaling, dict[int, deque[float]]] = field(default_factory=dict)
    _last_rps: dict[ServingScaling, float] = field(default_factory=dict)
    _slot_max: dict[ServingScaling, dict[int, float]] = field(default_factory=dict)
    _slot_max_sorted: dict[ServingScaling, list[float]] = field(default_factory=dict)  # _slot_max's values, sorted
    _slot_sd: dict[ServingScaling, dict[int, float]] = field(default_factory=dict)
    _slot_sd_sorted: dict[ServingScaling, list[float]] = field(default_factory=dict)  # _slot_sd's values, sorted
    _slot_tail: dict[ServingScaling, dict[int, float]] = field(default_factory=dict)  # computed when first read
    # per slot, what its tail is computed from (:func:`_t_tail`) while ``_slot_tail`` does not hold it yet
    _slot_tail_args: dict[ServingScaling, dict[int, tuple[int, float, float, float]]] = field(default_factory=dict)
    # per slot, the log of each of its jumps, oldest first (``np.log`` of ``_jumps``' deque, kept as it changes)
    _slot_logs: dict[ServingScaling, dict[int, np.ndarray]] = field(default_factory=dict)
    _step_state: dict[ServingScaling, _StepTables] = field(default_factory=dict)  # the above, per fleet
    _log_jumps: dict[ServingScaling, deque[float]] = field(default_factory=dict)
    _recent_logs: dict[ServingScaling, deque[float]] = field(default_factory=dict)
    # per fleet: [recent logs, residuals, residuals seen, (m, sigma), z's inputs, z] (:meth:`_noise_floor`)
    _noise_state: dict[ServingScaling, list[Any]] = field(default_factory=dict)

    def declare_fleet(
        self,
        scaling: ServingScaling,
        *,
        gpus_per_replica: int,
        slo_s: float | None,
        max_concurrency: int | None,
        price_usd_per_replica_h: float | None = None,
        gpu_type: str | None = None,
    ) -> None:
        """What the world declares of one fleet: its replica size (the spare's GPUs), the price of one more replica
        (the noise floor's newsvendor, the inner policy's scale-to-zero rule and budget; None: no noise floor) and, for gpufleet's inner policy, its latency
        SLO on queue wait and the requests one replica serves at once (None: batching); the GPU type its replicas
        run on (fleets of one type compete for its room during a stock-out, :func:`stockout_jump`; None: unknown)."""
        self.gpus_per_replica[scaling] = gpus_per_replica
        if gpu_type is not None:
            self.gpu_type[scaling] = gpu_type
        if price_usd_per_replica_h is not None:
            self.price_usd_per_replica_h[scaling] = price_usd_per_replica_h
        if isinstance(self.inner, PredictiveReplicas):
            opts: dict[str, float | int | None] = {"slo_s": slo_s, "max_concurrency": max_concurrency}
            if price_usd_per_replica_h is not None:  # its scale-to-zero rule and budget price the same replica
                opts["price_usd_per_replica_h"] = price_usd_per_replica_h
            self.inner.fleet_options[scaling] = opts

    def _spare(self, scaling: ServingScaling) -> int:
        g = self.gpus_per_replica.get(scaling)
        return max(self.spare, self.spare_gpus // g) if g else self.spare

    def _without_spare(self, signals: ReplicaSignals, scaling: ServingScaling) -> ReplicaSignals:
        """The fleet as the inner policy sees it: without its spare (:meth:`_spare`; taken from the replicas still
        starting first)."""
        s = signals
        spare = self._spare(scaling)
        off_starting = min(spare, s.starting)
        off_ready = min(spare - off_starting, s.ready)
        if off_starting == 0 and off_ready == 0:
            return s
        # ``replace(s, starting=..., ready=...)``, without its per-call field introspection
        return ReplicaSignals(
            s.now_s,
            s.ready - off_ready,
            s.starting - off_starting,
            s.period_s,
            s.arrival_rps,
            s.concurrency,
            s.queue_depth,
            s.load_replicas,
            s.peak_work,
            s.peak_concurrency,
            s.slo_misses,
            s.stocked_out,
        )

    def decide(self, signals: ReplicaSignals, scaling: ServingScaling) -> ReplicaDecision:
        d = self.inner.decide(self._without_spare(signals, scaling), scaling)
        want, reason = d.desired, d.reason
        asks = self._asks.get(scaling)
        if asks is None:
            asks = self._asks[scaling] = deque()
        asks.append(want)
        while len(asks) > max(1, int(self.window_s // self.period_s)):
            asks.popleft()
        # no peak floor (the loop's setting): 0 whatever the window's peak (ceil(0.0 x peak - 1e-9) is 0)
        floor = math.ceil(self.peak_floor * max(asks) - 1e-9) if self.peak_floor else 0
        if floor > want:
            want, reason = floor, "daily_peak_floor"
        step = self._step_floor(signals, scaling)
        if step > want:
            want, reason = step, "stockout_prewarm" if self._stockout_shared(signals, scaling) else "step_prewarm"
        spare = self._spare(scaling)
        want += spare
        noise = self._noise_floor(signals, scaling)
        if self.noise_spare:
            noise += spare
        if noise > want:
            want, reason = noise, "noise_floor"
        if self.step_hold and step > 0 and signals.ready > want:
            want, reason = signals.ready, "step_hold"
        if d.desired == 0 or d.budget_bound:
            # the inner policy scaled to zero (its cold-start-aware rule says zero pays: a spare would defeat it)
            # or its budget binds: nothing is added (the floors above still saw this period)
            return d
        return self._within_budget(d, min(want, scaling.max_replicas), reason, scaling)

    @staticmethod
    def _within_budget(d: ReplicaDecision, want: int, reason: str, scaling: ServingScaling) -> ReplicaDecision:
        """``want`` within the fleet's ``budget_usd_day`` at the inner decision's price per replica-day: the spare
        and the floors never spend above a budget that the inner policy kept to (reason ``budget_capped``)."""
        if d.spend_usd_day is None or d.desired <= 0:  # no budget declared: the inner policy prices nothing
            # ``replace(d, desired=want, reason=reason)``, without its per-call field introspection
            return ReplicaDecision(want, reason, d.forecast, d.budget_bound, d.budget_exceeded, d.degrade, None)
        per_day = d.spend_usd_day / d.desired
        budget = scaling.budget_usd_day
        if budget is not None and want * per_day > budget + 1e-9:
            cap = max(d.desired, math.floor(budget / per_day + 1e-9))
            return replace(d, desired=cap, reason="budget_capped", budget_bound=True, spend_usd_day=cap * per_day)
        return replace(d, desired=want, reason=reason, spend_usd_day=want * per_day)

    def react(self, signals: ReplicaSignals, scaling: ServingScaling) -> ReplicaDecision | None:
        """The fast path (a queue seen growing between two control periods): ``inner``'s reaction on the fleet
        without its spare, plus the spare; scale-up only. The floors are per-period forecasts: not applied here,
        and their history is not touched (only :meth:`decide` feeds it). The spare is priced as in :meth:`decide`:
        nothing is added when ``inner``'s budget binds, and the spare stays within the fleet's budget. None when
        ``inner`` does not react or the fleet already holds that many."""
        d = self.inner.react(self._without_spare(signals, scaling), scaling)
        if d is None:
            return None
        if not d.budget_bound:
            want = min(d.desired + self._spare(scaling), scaling.max_replicas)
            d = self._within_budget(d, want, d.reason, scaling)
        return d if d.desired > signals.total else None

    def _stockout_shared(self, s: ReplicaSignals, scaling: ServingScaling) -> bool:
        """The fleet's GPU type is out of stock and another declared fleet runs on it (:func:`stockout_jump`)."""
        if not (s.stocked_out and self.stockout_median):
            return False
        mine = self.gpu_type.get(scaling)
        return mine is not None and sum(1 for t in self.gpu_type.values() if t == mine) > 1

    def _step_floor(self, s: ReplicaSignals, scaling: ServingScaling) -> int:
        """Replicas (at 100% busy) for a step that recurs at this time of day, over the next two periods, so
        replicas are warm before the step rather than one cold start after it.

        Per time-of-day slot, the largest period-over-period ratio of the rate over the last ``step_days`` days
        (J). A slot is a step slot when its excess ``J - 1`` is at least ``step_outlier`` times the median slot's,
        or (``step_sd_outlier``) when the sd of its log jumps is at least ``step_outlier`` times the median slot's:
        the inner policy is already sized for the typical period-to-period change, so only such slots hold
        ``load x J``, J raised to the slot's Student-t tail (:meth:`_jump_spread`, :func:`_t_tail`) when ``breach_cost_usd`` is set.
        The world observed slot ``k - 1`` (the period just ended); this decision serves slot ``k``."""
        if self.step_days <= 0:
            return 0
        n = max(1, round(86400 / self.period_s))
        k = round(s.now_s / self.period_s)
        st = self._step_state.get(scaling)  # the fleet's slot tables, looked up once (one hash of ``scaling``)
        if st is None:
            st = self._step_state[scaling] = (
                self._jumps.setdefault(scaling, {}),
                self._slot_max.setdefault(scaling, {}),
                self._slot_max_sorted.setdefault(scaling, []),
                self._slot_sd.setdefault(scaling, {}),
                self._slot_sd_sorted.setdefault(scaling, []),
                self._slot_tail.setdefault(scaling, {}),
                self._slot_tail_args.setdefault(scaling, {}),
                self._slot_logs.setdefault(scaling, {}),
            )
        jumps, top, ranked, sds, ranked_sd, tails, tail_args, slot_logs = st
        prev = self._last_rps.get(scaling)
        if prev is not None and prev > 0 and s.arrival_rps > 0:
            slot = (k - 1) % n
            h = jumps.get(slot)
            if h is None:
                h = jumps[slot] = deque(maxlen=self.step_days)
                lg = slot_logs[slot] = np.empty(self.step_days)
            else:
                lg = slot_logs[slot]
            # within e^+-50 (no ratio overflows to inf or underflows to 0: the spread and the tail stay finite)
            x = min(max(s.arrival_rps / prev, 1.0 / _MAX_JUMP), _MAX_JUMP)
            full = len(h) == h.maxlen
            evicted = h[0] if full else None
            h.append(x)
            # the slot's log jumps, oldest first: np.log of the deque, one new log per jump (an elementwise ufunc)
            m = len(h)
            if full:
                lg[:-1] = lg[1:]
            lg[m - 1] = np.log(x)
            if m >= self.step_min_days:
                j_old = top.get(slot)
                # max(h), from the last max when it stays valid: x reaches it, or the jump that left was below it
                if j_old is not None and x >= j_old:
                    j_new = x
                elif j_old is not None and (evicted is None or evicted < j_old):
                    j_new = j_old
                else:
                    j_new = max(h)
                _set_ranked(top, ranked, slot, j_new)
                if self.step_sd_outlier or self.breach_cost_usd > 0:
                    # the sd of the slot's log jumps now; its tail (a Student-t quantile) only when a step slot reads it
                    sd, args = self._jump_spread(lg[:m], scaling)
                    tails.pop(slot, None)
                    if args is None:
                        tails[slot] = 0.0
                        tail_args.pop(slot, None)
                    else:
                        tail_args[slot] = args
                    _set_ranked(sds, ranked_sd, slot, sd)
        self._last_rps[scaling] = s.arrival_rps
        if len(top) < n:
            return 0
        typical = sorted_median(ranked)  # np.median of top's values, kept sorted as they change
        j = max(top[k % n], top[(k + 1) % n])
        step = j > 1.0 and j - 1.0 >= self.step_outlier * max(typical - 1.0, 0.0)
        if not step and self.step_sd_outlier:
            typical_sd = sorted_median(ranked_sd)  # np.median of sds' values, kept sorted as they change
            step = max(sds[k % n], sds[(k + 1) % n]) >= self.step_outlier * typical_sd > 0
        if not step:
            return 0
        if self._stockout_shared(s, scaling):  # the slots' median jump (:func:`stockout_jump`)
            j = max(stockout_jump(slot_logs, jumps, k % n), stockout_jump(slot_logs, jumps, (k + 1) % n))
        else:
            j = max(j, _slot_tail(tails, tail_args, k % n), _slot_tail(tails, tail_args, (k + 1) % n))
        return _replicas(s.load_replicas * j)

    def _z(self, scaling: ServingScaling, sigma: float) -> float:
        """The newsvendor's z of this fleet for a log-normal spread ``sigma`` (0 when off or the price unknown)."""
        price = self.price_usd_per_replica_h.get(scaling)
        if self.breach_cost_usd <= 0 or price is None:
            return 0.0
        return newsvendor_z(
            sigma,
            price_usd_per_replica_period=price * self.period_s / 3600.0,
            requests_per_replica_s=scaling.target_rps_per_replica,
            breach_cost_usd=self.breach_cost_usd,
            period_s=self.period_s,
        )

    def _jump_spread(
        self, logs: np.ndarray, scaling: ServingScaling
    ) -> tuple[float, tuple[int, float, float, float] | None]:
        """The slot's spread in two steps, from the log of each of its jumps (oldest first): the sd of its log
        jumps now (the very ``np.std(ddof=1)``: the same pairwise sums, without its Python-level wrappers), and
        what its tail is computed from (:func:`_t_tail`; None where the tail is 0), so that the Student-t quantile
        is only taken for the slots a step actually reads."""
        n = len(logs)
        if n <= 1:
            return 0.0, None
        mean = float(_ADD(logs)) / n  # np.mean: the pairwise sum over the count
        d = logs - mean
        sd = math.sqrt(float(_ADD(d * d)) / (n - 1))  # np.std(ddof=1): the same mean, squares and sum
        z = self._z(scaling, sd)
        if z <= 0 or sd <= 0:
            return sd, None
        return sd, (n - 1, z, mean, sd)

    def _noise_floor(self, s: ReplicaSignals, scaling: ServingScaling) -> int:
        """Replicas (at 100% busy) for the recent rate times ``exp(m + z sigma)``: the recent rate is the geometric
        mean of the last ``noise_base_periods`` periods' rates, m and sigma the median and robust sd (1.4826 x
        median absolute deviation) of the log of each period's rate over that base, over ``noise_days`` days; z the
        newsvendor's (:func:`newsvendor_z`). 0 until ``noise_min_periods`` residuals were seen, or when off."""
        price = self.price_usd_per_replica_h.get(scaling)
        if self.breach_cost_usd <= 0 or price is None:
            return 0
        n = max(1, round(86400 / self.period_s))
        st = self._noise_state.get(scaling)  # the fleet's noise tables, looked up once (one hash of ``scaling``)
        if st is None:
            st = self._noise_state[scaling] = [
                self._recent_logs.setdefault(scaling, deque(maxlen=self.noise_base_periods)),
                self._log_jumps.setdefault(scaling, deque(maxlen=max(2, self.noise_days * n))),
                0,  # residuals seen
                None,  # (m, sigma) once measured
                None,  # (sigma, price, breach cost, period) -> z: the newsvendor's z of the last sigma
                0.0,
            ]
        logs, res = st[0], st[1]
        if s.arrival_rps <= 0:
            return 0
        x = math.log(s.arrival_rps)
        if len(logs) == self.noise_base_periods:
            res.append(x - sum(logs) / len(logs))
            seen = st[2] = st[2] + 1
            if len(res) >= self.noise_min_periods and (seen % n == 0 or st[3] is None):
                a = np.fromiter(res, dtype=np.float64, count=len(res))
                med = float(np.median(a))
                st[3] = (med, 1.4826 * float(np.median(np.abs(a - med))))
        logs.append(x)
        m, sigma = st[3] if st[3] is not None else (0.0, 0.0)
        if sigma <= 0 or len(logs) < self.noise_base_periods:
            return 0
        key = (sigma, price, self.breach_cost_usd, self.period_s)
        if st[4] == key:  # sigma is measured once a day: its z too (``self._z``, the same inputs)
            z = st[5]
        else:
            z = st[5] = self._z(scaling, sigma)
            st[4] = key
        if z <= 0:
            return 0
        base_rps = math.exp(sum(logs) / len(logs))
        return _replicas(base_rps / scaling.target_rps_per_replica * math.exp(min(m + z * sigma, MAX_LOG_JUMP)))


def _replicas(need: float) -> int:
    """``need`` (replicas at 100% busy) as a whole count, 1e-9 of rounding forgiven; a need past ``_MAX_COUNT``
    (an overflowing load, inf) is ``_MAX_COUNT``: "every replica", which ``decide`` caps at ``max_replicas``."""
    return math.ceil(need - 1e-9) if need < _MAX_COUNT else _MAX_COUNT


def stockout_jump(slot_logs: dict[int, np.ndarray], jumps: dict[int, deque[float]], slot: int) -> float:
    """The step pre-warm's jump at ``slot`` while the fleet's GPU type is out of stock: the median of the slot's
    jumps (0 for a slot with none), the newsvendor's quantile at z = 0.

    In stock, a pre-warm replica costs its price and the pre-warm holds the slot's largest jump, or the tail
    the newsvendor's z reaches (:meth:`SpareReplicas._step_floor`). Out of stock, the room a pre-warm takes cannot
    be replaced: a replica held for a step that does not come is room a sibling fleet of the same GPU type (whose
    step does come: default seed 19, docs/benchmarks/loop.md session 15) cannot have, and serving replicas do not
    preempt each other, so an extra replica costs about what it saves (a missed request either way): critical
    ratio 1/2, the median. A fleet alone on its GPU type keeps the in-stock sizing: its pre-warm takes room only
    from work it may preempt, or from idle nodes."""
    h = jumps.get(slot)
    if not h:
        return 0.0
    return math.exp(float(np.median(slot_logs[slot][: len(h)])))


def _t_tail(df: int, z: float, mean: float, sd: float) -> float:
    """A slot's tail jump (:meth:`SpareReplicas._jump_spread`'s arguments): ``exp(mean + t sd)``, t the Student-t quantile (``df``
    degrees of freedom) at the normal's probability of ``z``."""
    from scipy import special  # here, not at module level: scipy.special takes ~0.3 s to import

    t = float(special.stdtrit(df, special.ndtr(z)))
    if not math.isfinite(t):  # z past float's normal tail (a spread of rounding noise): the last finite quantile
        t = float(special.stdtrit(df, 1.0 - 1e-15))
    return math.exp(min(mean + t * sd, MAX_LOG_JUMP))


def _slot_tail(tails: dict[int, float], args: dict[int, tuple[int, float, float, float]], slot: int) -> float:
    """The slot's tail jump (0 for a slot with none): kept once computed, until the slot's jumps change."""
    got = tails.get(slot)
    if got is None:
        a = args.get(slot)
        if a is None:
            return 0.0
        got = tails[slot] = _t_tail(*a)
    return got


def _set_ranked(by_slot: dict[int, float], ranked: list[float], slot: int, value: float) -> None:
    """Set ``by_slot[slot]`` and keep ``ranked`` the sorted list of ``by_slot``'s values."""
    old = by_slot.get(slot)
    if old == value:
        return
    if old is not None:
        del ranked[bisect_left(ranked, old)]
    insort(ranked, value)
    by_slot[slot] = value


def sorted_median(xs: list[float]) -> float:
    """The median of a sorted, non-empty list, as ``np.median`` computes it (the mean of the middle two)."""
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2.0


def newsvendor_z(
    sigma: float,
    *,
    price_usd_per_replica_period: float,
    requests_per_replica_s: float,
    breach_cost_usd: float,
    period_s: float,
) -> float:
    """Standard normal z at which one more replica costs what it saves in expected missed requests.

    A period whose rate R (log-normal, spread ``sigma``) exceeds the ready replicas' capacity ``n c`` misses
    (nearly) all its ``R T`` requests. Expected cost ``n p + P(R > n c) n c T b``; its derivative in n is zero where
    ``phi(z) = p sigma / (c T b)`` (using ``f_R(x) x = phi(z) / sigma``). 0 when even z = 0 does not pay.
    """
    if sigma <= 0 or breach_cost_usd <= 0 or requests_per_replica_s <= 0:
        return 0.0
    phi = price_usd_per_replica_period * sigma / (requests_per_replica_s * period_s * breach_cost_usd)
    top = 1.0 / math.sqrt(2.0 * math.pi)
    if phi >= top:
        return 0.0
    return math.sqrt(-2.0 * math.log(phi / top))
