"""The serving stages' fast paths give the very numbers of the plain computations they replace (bench sim speed).

Each fast path is checked against the code it replaced, kept here as the reference: the step pre-warm's median of
the slot maxima (a sorted list kept as the maxima change, instead of ``np.median`` per period) and the slot maxima
themselves (from the last maximum while it stays valid); the replica forecaster's bucket close (the seasonal
growth's ratios memoised per bucket, locals instead of attribute reads); the SES weight matrices of the demand
forecaster's refits (one cached matrix for the longest series, its leading block for shorter ones).
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import special

from gpufleet.autoscale.forecaster import CANDIDATES, N_CANDIDATES, OnlineQuantileForecaster, _Ring
from gpufleet.autoscale.policy_base import RatePolicy
from gpufleet.control.serving_headroom import MAX_LOG_JUMP, SpareReplicas, sorted_median
from gpufleet.domain.workloads import ServingScaling
from gpufleet.forecast.components import SES_SMALL, _ses_levels_small
from gpufleet.ports import ReplicaDecision, ReplicaSignals

# patches or subclasses the simulator's internals: the source-only lane (tests/conftest.py)
pytestmark = pytest.mark.source_only

PERIOD = 900.0
FLEET = ServingScaling(min_replicas=1, max_replicas=500, target_rps_per_replica=10.0)


# ---------------------------------------------------------------- step pre-warm: median and maxima of the slots
@given(st.lists(st.floats(0.01, 100.0), min_size=1, max_size=200))
def test_sorted_median_is_numpys_median(xs: list[float]) -> None:
    assert sorted_median(sorted(xs)) == float(np.median(np.asarray(xs)))


class Follows(RatePolicy):
    name = "follows"
    period_s = PERIOD

    def decide(self, signals: ReplicaSignals, scaling: ServingScaling) -> ReplicaDecision:
        return ReplicaDecision(max(1, round(signals.load_replicas)), "follows")


def tail_jump(sp: SpareReplicas, jumps: deque[float], scaling: ServingScaling) -> tuple[float, float]:
    """The slot's sd and Student-t tail as first written (np.std, np.mean, the quantile every time): the reference
    of ``SpareReplicas._jump_spread`` + ``_t_tail``."""
    logs = np.log(np.fromiter(jumps, dtype=np.float64, count=len(jumps)))
    sd = float(np.std(logs, ddof=1)) if len(logs) > 1 else 0.0
    z = sp._z(scaling, sd)
    if z <= 0 or sd <= 0:
        return sd, 0.0
    t = float(special.stdtrit(len(logs) - 1, special.ndtr(z)))
    if not math.isfinite(t):  # z past float's normal tail (a spread of rounding noise): the last finite quantile
        t = float(special.stdtrit(len(logs) - 1, 1.0 - 1e-15))
    return sd, math.exp(min(float(np.mean(logs)) + t * sd, MAX_LOG_JUMP))


class ReferenceStep(SpareReplicas):
    """SpareReplicas with ``_step_floor`` as first written (max of the slot's jumps and np.median every period)."""

    def _step_floor(self, s: ReplicaSignals, scaling: ServingScaling) -> int:
        if self.step_days <= 0:
            return 0
        n = max(1, round(86400 / self.period_s))
        k = round(s.now_s / self.period_s)
        jumps = self._jumps.setdefault(scaling, {})
        top = self._slot_max.setdefault(scaling, {})
        sds = self._slot_sd.setdefault(scaling, {})
        tails = self._slot_tail.setdefault(scaling, {})
        prev = self._last_rps.get(scaling)
        if prev is not None and prev > 0 and s.arrival_rps > 0:
            slot = (k - 1) % n
            h = jumps.setdefault(slot, deque(maxlen=self.step_days))
            h.append(s.arrival_rps / prev)
            if len(h) >= self.step_min_days:
                top[slot] = max(h)
                if self.step_sd_outlier or self.breach_cost_usd > 0:
                    sds[slot], tails[slot] = tail_jump(self, h, scaling)
        self._last_rps[scaling] = s.arrival_rps
        if len(top) < n:
            return 0
        typical = float(np.median(np.fromiter(top.values(), dtype=np.float64, count=len(top))))
        j = max(top[k % n], top[(k + 1) % n])
        step = j > 1.0 and j - 1.0 >= self.step_outlier * max(typical - 1.0, 0.0)
        if not step and self.step_sd_outlier:
            typical_sd = float(np.median(np.fromiter(sds.values(), dtype=np.float64, count=len(sds))))
            step = max(sds[k % n], sds[(k + 1) % n]) >= self.step_outlier * typical_sd > 0
        if not step:
            return 0
        j = max(j, tails.get(k % n, 0.0), tails.get((k + 1) % n, 0.0))
        return math.ceil(s.load_replicas * j - 1e-9)


@settings(max_examples=25, deadline=None)
@given(
    period=st.sampled_from([3600.0, 7200.0, 21600.0]),  # 24, 12 or 4 slots a day: many days in few periods
    step_days=st.integers(1, 6),
    step_min_days=st.integers(1, 4),
    levels=st.lists(st.sampled_from([0.0, 1.0, 2.0, 3.0, 50.0, 80.0, 100.0, 160.0]), min_size=50, max_size=400),
    step_sd_outlier=st.booleans(),
)
def test_step_floor_matches_the_plain_computation(
    period: float, step_days: int, step_min_days: int, levels: list[float], step_sd_outlier: bool
) -> None:
    kw = {
        "period_s": period,
        "spare": 1,
        "peak_floor": 0.5,
        "step_days": step_days,
        "step_min_days": step_min_days,
        "step_sd_outlier": step_sd_outlier,
        "breach_cost_usd": 0.01 if step_sd_outlier else 0.0,
        "price_usd_per_replica_h": {FLEET: 2.0},
    }
    fast = SpareReplicas(Follows(), **kw)  # type: ignore[arg-type]
    ref = ReferenceStep(Follows(), **kw)  # type: ignore[arg-type]
    ready = 1
    for k, rps in enumerate(levels):
        sig = ReplicaSignals(k * period, ready, 0, period, rps, rps / 10.0, 0, rps / 10.0)
        a, b = fast.decide(sig, FLEET), ref.decide(sig, FLEET)
        assert (a.desired, a.reason) == (b.desired, b.reason), k
        assert fast._slot_max == ref._slot_max
        assert fast._slot_max_sorted[FLEET] == sorted(ref._slot_max[FLEET].values())
        assert fast._slot_sd_sorted[FLEET] == sorted(ref._slot_sd[FLEET].values())
        ready = a.desired


def test_step_floor_fast_path_sees_steps_and_evictions() -> None:
    """A daily step over many days with a short memory: maxima leave the window and steps are pre-warmed."""
    fast = SpareReplicas(Follows(), PERIOD, spare=0, step_days=3, step_min_days=2)
    ref = ReferenceStep(Follows(), PERIOD, spare=0, step_days=3, step_min_days=2)
    ready = 10
    reasons: set[str] = set()
    for k in range(1, 96 * 12):
        rps = 100.0 + (60.0 + 10 * (k // 96 % 4) if k % 96 == 0 else 0.0) + (k % 7)
        sig = ReplicaSignals(k * PERIOD, ready, 0, PERIOD, rps, rps / 10.0, 0, rps / 10.0)
        a, b = fast.decide(sig, FLEET), ref.decide(sig, FLEET)
        assert (a.desired, a.reason) == (b.desired, b.reason), k
        reasons.add(a.reason)
        ready = a.desired
    assert "step_prewarm" in reasons


# ---------------------------------------------------------------- the replica forecaster's bucket close
class PlainRing(_Ring):
    """The residual ring with its quantile as first written (partitioned at every call)."""

    def quantile(self, q: float) -> float:
        k = min(self.n - 1, max(0, math.ceil(q * self.n) - 1))
        return float(np.partition(self.buf[: self.n], k)[k])


class ReferenceForecaster(OnlineQuantileForecaster):
    """The forecaster with ``_close_bucket``, ``_seasonal_growth`` and the rings' quantile as first written."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        size = self._resid[0].size
        self._resid = [PlainRing(size) for _ in self._resid]
        self._resid_bin = [[PlainRing(size) for _ in bins] for bins in self._resid_bin]

    def _close_bucket(self, mean: float) -> None:
        h = self._hist
        h.append(mean)
        n = len(h)
        f = self.floor
        for c in range(N_CANDIDATES):
            pend = self._pending[c]
            additive = CANDIDATES[c][1] == "add"
            while pend and pend[0][0] <= n:
                due, point, b, up = pend.popleft()
                fut = max(h[due - self.horizon_b : due])
                y = math.log(fut + f)
                r = (fut - point) / f if additive else y - math.log(point + f)
                self._resid[c].append(r)
                self._resid_bin[c][b].append(r)
                miss = y - math.log(up + f)
                pin = self.quantile * miss if miss > 0 else (self.quantile - 1.0) * miss
                self._loss[c] += self._alpha * (pin - self._loss[c])
                self._loss_w[c] += self._alpha * (1.0 - self._loss_w[c])
        self._since_refresh += 1
        if self._since_refresh >= self.refresh_buckets or n <= self.min_residuals + self.horizon_b:
            self._refresh_quantiles()
        self._sum_level += mean - (h[n - 1 - self.level_b] if n > self.level_b else 0.0)
        self._sum_slow += mean - (h[n - 1 - self.slow_b] if n > self.slow_b else 0.0)
        while self._peak and self._peak[-1][1] <= mean:
            self._peak.pop()
        self._peak.append((n - 1, mean))
        while self._peak[0][0] <= n - 1 - self.slow_b:
            self._peak.popleft()
        level = max(0.0, self._sum_level / min(n, self.level_b))
        slow = max(0.0, self._sum_slow / min(n, self.slow_b))
        self._level = level
        dev = math.log((level + f) / (slow + f))
        b = sum(1 for e in self.edges if dev > e)
        growth = self._seasonal_growth(n)
        points = (level, max(0.0, (level + f) * growth - f), self._peak[0][1])
        uppers = []
        mature = (True, n >= self.season_b + self.level_b, n >= self.slow_b)
        for c, (pi, kind) in enumerate(CANDIDATES):
            p, q = points[pi], self._q_bin[c][b]
            up = max(0.0, p + q * f if kind == "add" else (p + f) * math.exp(q) - f)
            uppers.append(up)
            if mature[pi]:
                self._pending[c].append((n + self.horizon_b, p, b, up))
        usable = [c for c, (pi, _) in enumerate(CANDIDATES) if mature[pi] and self._resid[c].n >= self.min_residuals]
        if usable:
            # the lowest mean loss: each EWMA divided by the EWMA of 1 (its weight; session 34's bias correction)
            self.chosen = min(usable, key=lambda c: self._loss[c] / self._loss_w[c] if self._loss_w[c] > 0 else 0.0)
            best_up = uppers[self.chosen]
        else:  # warm-up: the level times the warm-up ratio
            self.chosen, best_up = 0, self._warm_ratio * level
        self._upper = max(best_up, points[1] if growth > 1.0 else 0.0)

    def _seasonal_growth(self, n: int) -> float:
        s, lb, hb = self.season_b, self.level_b, self.horizon_b
        ratios = []
        for k in range(1, self.max_seasons + 1):
            at = n - k * s
            if at - lb < 0:
                break
            past = self._hist[at - lb : at]
            fut = self._hist[at : at + hb]
            ratios.append((max(fut) + self.floor) / (sum(past) / len(past) + self.floor))
        if not ratios:
            return 1.0
        ratios.sort()
        mid = len(ratios) // 2
        med = ratios[mid] if len(ratios) % 2 else 0.5 * (ratios[mid - 1] + ratios[mid])
        return min(4.0, max(0.5, med))


@settings(max_examples=30, deadline=None)
@given(
    values=st.lists(st.sampled_from([0.0, 0.5, 1.0, 4.0, 10.0, 30.0, 100.0]), min_size=20, max_size=300),
    bucket=st.sampled_from([10.0, 60.0, 900.0]),
    season_buckets=st.integers(1, 12),
    horizon_s=st.sampled_from([60.0, 900.0, 1500.0, 5000.0]),
    level_buckets=st.integers(1, 4),
    span=st.sampled_from([1.0, 2.0, 0.5]),
)
def test_bucket_close_matches_the_plain_computation(
    values: list[float], bucket: float, season_buckets: int, horizon_s: float, level_buckets: int, span: float
) -> None:
    """Seasons as short as one bucket (shorter than the horizon: ratios whose future window is not complete are
    not memoised), observations spanning several buckets or part of one."""
    kw = {
        "horizon_s": horizon_s,
        "floor": 2.0,
        "bucket_s": bucket,
        "level_window_s": level_buckets * bucket,
        "slow_window_s": 3 * level_buckets * bucket,
        "season_s": season_buckets * bucket,
        "residual_window": 50,
        "min_residuals": 5,
        "refresh_buckets": 4,
        "loss_halflife_buckets": 20.0,
        "max_seasons": 3,
    }
    fast, ref = OnlineQuantileForecaster(**kw), ReferenceForecaster(**kw)  # type: ignore[arg-type]
    t = 0.0
    for v in values:
        t += span * bucket
        fast.observe(t, v, span * bucket)
        ref.observe(t, v, span * bucket)
        assert (fast.upper(), fast.level(), fast.chosen) == (ref.upper(), ref.level(), ref.chosen)
    assert fast._loss == ref._loss and fast._loss_w == ref._loss_w and fast._q_bin == ref._q_bin


def test_bucket_close_matches_over_weeks_of_a_daily_cycle() -> None:
    """The simulator's setting (900 s buckets, a day's season, seven seasons) over three weeks of a noisy cycle."""
    kw = {
        "horizon_s": 1500.0,
        "floor": 8.0,
        "bucket_s": 900.0,
        "level_window_s": 900.0,
        "slow_window_s": 8 * 900.0,
        "residual_window": 7 * 96,
        "refresh_buckets": 24,
        "loss_halflife_buckets": 96.0,
    }
    fast, ref = OnlineQuantileForecaster(**kw), ReferenceForecaster(**kw)  # type: ignore[arg-type]
    rng = np.random.default_rng(11)
    for k in range(96 * 21):
        v = float(100.0 + 60.0 * math.sin(2 * math.pi * k / 96) + rng.normal(0, 10))
        fast.observe((k + 1) * 900.0, v, 900.0)
        ref.observe((k + 1) * 900.0, v, 900.0)
        assert (fast.upper(), fast.level(), fast.chosen) == (ref.upper(), ref.level(), ref.chosen)


# ---------------------------------------------------------------- SES weights of the demand forecaster's refits
def reference_ses_levels_small(y: np.ndarray, alphas: np.ndarray) -> np.ndarray:
    m = len(y) - 1
    lag = np.subtract.outer(np.arange(m), np.arange(m))
    low = lag >= 0
    decay = (1.0 - alphas)[:, None, None] ** np.where(low, lag, 0)[None]
    weights = np.where(low[None], alphas[:, None, None] * decay, 0.0)
    start = (1.0 - alphas)[:, None] ** (np.arange(m) + 1)[None, :] * y[0]
    return np.asarray(weights @ y[1:] + start, dtype=np.float64)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, SES_SMALL), seed=st.integers(0, 10_000))
def test_ses_levels_from_the_cached_weights_are_the_plain_ones(n: int, seed: int) -> None:
    alphas = (0.02, 0.05, 0.1, 0.2, 0.35, 0.5, 0.7, 0.9)
    y = np.random.default_rng(seed).gamma(2.0, 50.0, n)
    got = _ses_levels_small(y, alphas)
    want = reference_ses_levels_small(y, np.asarray(alphas))
    assert got.shape == want.shape and np.array_equal(got, want)


# ---------------------------------------------------------------- the node scaler's offers (sim/moves.py, sim/nodes.py)
def test_move_and_scale_down_offers_are_the_plain_ones() -> None:
    """The consolidation offer (the candidate loop inlined) and the scale-down offer (pool fields read once, tuples
    built by tuple.__new__) hold what the plain per-pod and per-node constructions give, call by call."""
    from gpufleet.domain.pools import TIER_RANK
    from gpufleet.ports import IdleNode, MoveContext, ScaleDownContext
    from gpufleet.sim.builtin import default_scenario
    from gpufleet.sim.kinds import LAUNCHED_RANKS, LAUNCHED_TIERS
    from gpufleet.sim.run import gpufleet_loop
    from gpufleet.sim.world import World

    sc = default_scenario(gpus=512, days=8, seed=12)
    loop = gpufleet_loop(sc, 12)
    w = World(sc, loop)
    f, mv, scaler = w.fleet, w.consolidation, loop.node_scaler
    moves, scale_down = scaler.moves, scaler.scale_down
    seen = {"moves": 0, "offered": 0, "down": 0, "idle": 0}

    def checked_moves(ctx: MoveContext) -> list[tuple[int, str]]:
        s = w.sku_ids.index(ctx.sku_id)
        per = w.per_node[s]
        ref, done = [], set()
        for t in LAUNCHED_RANKS:
            for node in f.index.iter_with_free(s, t, 0):
                for pod in f.n_pods[node]:
                    if pod in done:
                        continue
                    done.add(pod)
                    c = mv._move_candidate(pod, per, ctx.now_s)
                    if c is not None:
                        ref.append(c)
        assert list(ctx.running) == ref
        seen["moves"] += 1
        seen["offered"] += len(ref)
        return moves(ctx)

    def checked_scale_down(ctx: ScaleDownContext) -> list[tuple[int, str]]:
        s = w.sku_ids.index(ctx.sku_id)
        per, now = w.per_node[s], ctx.now_s
        ref = []
        for tier in LAUNCHED_TIERS:
            for n in f.index.iter_with_free(s, TIER_RANK[tier], per):
                idle_s = now - f.n_idle_since[n]
                if idle_s < scaler.min_idle_s:
                    continue
                pr = f.pools[f.n_pool[n]]
                ref.append(
                    IdleNode(
                        n,
                        pr.pool.id,
                        ctx.sku_id,
                        pr.tier_name,
                        per,
                        idle_s,
                        now - f.n_up_since[n],
                        pr.pool.node_start_s,
                        pr.price_usd,
                    )
                )
        assert list(ctx.idle) == ref and all(type(x) is IdleNode for x in ctx.idle)
        seen["down"] += 1
        seen["idle"] += len(ref)
        return scale_down(ctx)

    scaler.moves = checked_moves  # type: ignore[method-assign]
    scaler.scale_down = checked_scale_down  # type: ignore[method-assign]
    w.run()
    assert seen["moves"] > 10 and seen["offered"] > 10 and seen["down"] > 10 and seen["idle"] > 10, seen


# ---------------------------------------------------------------- session 12: the serving tick's policy path
@settings(max_examples=200, deadline=None)
@given(
    jumps=st.lists(st.floats(0.05, 20.0), min_size=1, max_size=91),
    price=st.sampled_from([0.5, 2.0, 27.52, 1e4]),
    breach=st.sampled_from([0.0, 0.001, 0.01, 1.0]),
)
def test_jump_spread_and_lazy_tail_are_tail_jump(jumps: list[float], price: float, breach: float) -> None:
    """The sd now and the Student-t tail when read (:func:`_slot_tail`) are :func:`tail_jump`'s, to the bit."""
    from gpufleet.control.serving_headroom import _slot_tail

    sp = SpareReplicas(Follows(), PERIOD, breach_cost_usd=breach, price_usd_per_replica_h={FLEET: price})
    h = deque(jumps)
    sd, args = sp._jump_spread(np.log(np.fromiter(h, dtype=np.float64, count=len(h))), FLEET)
    try:
        sd_ref, tail_ref = tail_jump(sp, h, FLEET)
    except OverflowError:  # a tail beyond floats (few jumps, a huge t): the lazy tail overflows when read
        assert args is not None
        with pytest.raises(OverflowError):
            _slot_tail({}, {0: args}, 0)
        return
    assert sd == sd_ref
    tails: dict[int, float] = {} if args is not None else {0: 0.0}
    assert _slot_tail(tails, {0: args} if args is not None else {}, 0) == tail_ref
    assert _slot_tail(tails, {}, 0) == tail_ref  # kept once computed


def test_step_floor_lazy_tails_over_weeks_of_noisy_steps() -> None:
    """The simulator's setting (96 slots, 91 days of jumps, the noise floor's newsvendor on): a noisy daily cycle
    with recurring steps, the fast step floor (sd now, tails when read) against the plain one, decision by
    decision; steps are pre-warmed with a tail above the largest jump."""
    kw = {"spare": 1, "peak_floor": 0.5, "price_usd_per_replica_h": {FLEET: 2.0}}
    fast = SpareReplicas(Follows(), PERIOD, **kw)  # type: ignore[arg-type]
    ref = ReferenceStep(Follows(), PERIOD, **kw)  # type: ignore[arg-type]
    rng = np.random.default_rng(5)
    ready, steps = 10, 0
    for k in range(1, 96 * 20):
        rps = 100.0 + 40.0 * math.sin(2 * math.pi * k / 96) + float(rng.normal(0, 8))
        if k % 96 in (30, 31):
            rps *= 1.6 + 0.4 * float(rng.random())
        sig = ReplicaSignals(k * PERIOD, ready, 0, PERIOD, rps, rps / 10.0, 0, rps / 10.0)
        a, b = fast.decide(sig, FLEET), ref.decide(sig, FLEET)
        assert a == b, k
        steps += a.reason == "step_prewarm"
        ready = a.desired
    assert steps > 5
    assert fast._slot_sd == ref._slot_sd and fast._slot_max == ref._slot_max
    for slot, tail in fast._slot_tail[FLEET].items():  # the tails computed so far are the plain ones
        assert tail == ref._slot_tail[FLEET][slot]


class ReferenceSignals(SpareReplicas):
    """SpareReplicas handing ``inner`` the fleet and returning its decision through ``dataclasses.replace``."""

    def _without_spare(self, signals: ReplicaSignals, scaling: ServingScaling) -> ReplicaSignals:
        from dataclasses import replace

        spare = self._spare(scaling)
        off_starting = min(spare, signals.starting)
        off_ready = min(spare - off_starting, signals.ready)
        return replace(signals, starting=signals.starting - off_starting, ready=signals.ready - off_ready)


@settings(max_examples=100, deadline=None)
@given(
    ready=st.integers(0, 50),
    starting=st.integers(0, 5),
    spare=st.integers(0, 3),
    rps=st.floats(0.0, 500.0),
    peak=st.one_of(st.none(), st.floats(0.0, 100.0)),
    misses=st.one_of(st.none(), st.floats(0.0, 100.0)),
)
def test_spare_signals_and_decision_are_replaces(
    ready: int, starting: int, spare: int, rps: float, peak: float | None, misses: float | None
) -> None:
    sig = ReplicaSignals(
        900.0,
        ready,
        starting,
        PERIOD,
        rps,
        rps / 9,
        3,
        rps / 10,
        ((1.0, 2.0),),
        peak_concurrency=peak,
        slo_misses=misses,
    )
    fast, ref = SpareReplicas(Follows(), spare=spare), ReferenceSignals(Follows(), spare=spare)
    assert fast._without_spare(sig, FLEET) == ref._without_spare(sig, FLEET)
    assert fast.decide(sig, FLEET) == ref.decide(sig, FLEET)


def reference_static_quantile(req: list[float], n: list[float], attainment: float) -> float:
    """StaticFleetEstimate._quantile as first written (numpy)."""
    a, w = np.asarray(req), np.asarray(n)
    order = np.argsort(a, kind="stable")
    cum = np.cumsum(w[order])
    k = int(np.searchsorted(cum, attainment * cum[-1] - 1e-9))
    return float(a[order][min(k, len(a) - 1)])


@settings(max_examples=300, deadline=None)
@given(
    pairs=st.lists(
        st.tuples(st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.25, 7.0, 40.0]), st.floats(0.001, 1e5)),
        min_size=1,
        max_size=60,
    ),
    attainment=st.sampled_from([0.5, 0.9, 0.99, 1.0]),
)
def test_static_fleet_quantile_is_numpys(pairs: list[tuple[float, float]], attainment: float) -> None:
    """Both paths (plain Python up to ``_SMALL_HOUR`` periods, numpy above) give the numpy computation; ties in
    the requirement keep their order (stable)."""
    from gpufleet.autoscale.static_fleet import StaticFleetEstimate

    est = StaticFleetEstimate(attainment=attainment)
    est._req = [r for r, _ in pairs]
    est._n = [w for _, w in pairs]
    assert est._quantile() == reference_static_quantile(est._req, est._n, attainment)


class ReferenceNoise(SpareReplicas):
    """SpareReplicas with ``_noise_floor`` as first written (a dict lookup per table, z computed every period)."""

    def _noise_floor(self, s: ReplicaSignals, scaling: ServingScaling) -> int:
        if self.breach_cost_usd <= 0 or scaling not in self.price_usd_per_replica_h:
            return 0
        seen: dict[ServingScaling, int] = self.__dict__.setdefault("ref_seen", {})
        sigmas: dict[ServingScaling, tuple[float, float]] = self.__dict__.setdefault("ref_sigma", {})
        n = max(1, round(86400 / self.period_s))
        logs = self._recent_logs.setdefault(scaling, deque(maxlen=self.noise_base_periods))
        res = self._log_jumps.setdefault(scaling, deque(maxlen=max(2, self.noise_days * n)))
        if s.arrival_rps <= 0:
            return 0
        x = math.log(s.arrival_rps)
        if len(logs) == self.noise_base_periods:
            res.append(x - sum(logs) / len(logs))
            seen[scaling] = seen.get(scaling, 0) + 1
            if len(res) >= self.noise_min_periods and (seen[scaling] % n == 0 or scaling not in sigmas):
                a = np.fromiter(res, dtype=np.float64, count=len(res))
                med = float(np.median(a))
                sigmas[scaling] = (med, 1.4826 * float(np.median(np.abs(a - med))))
        logs.append(x)
        m, sigma = sigmas.get(scaling, (0.0, 0.0))
        if sigma <= 0 or len(logs) < self.noise_base_periods:
            return 0
        z = self._z(scaling, sigma)
        if z <= 0:
            return 0
        base_rps = math.exp(sum(logs) / len(logs))
        return math.ceil(base_rps / scaling.target_rps_per_replica * math.exp(m + z * sigma) - 1e-9)


@settings(max_examples=40, deadline=None)
@given(
    period=st.sampled_from([3600.0, 7200.0, 21600.0]),
    rates=st.lists(st.sampled_from([0.0, 1.0, 5.0, 40.0, 80.0, 100.0, 130.0, 400.0]), min_size=30, max_size=300),
    price=st.sampled_from([0.5, 2.0, 27.52]),
    base=st.integers(1, 4),
)
def test_noise_floor_matches_the_plain_computation(period: float, rates: list[float], price: float, base: int) -> None:
    """The noise floor with its tables looked up once per fleet and z kept while sigma holds, against the plain
    one: two fleets interleaved (their tables apart), sigma re-measured once a day."""
    other = ServingScaling(min_replicas=1, max_replicas=80, target_rps_per_replica=3.0)
    kw = {
        "spare": 1,
        "step_days": 0,
        "noise_min_periods": 8,
        "noise_base_periods": base,
        "noise_days": 2,
        "price_usd_per_replica_h": {FLEET: price, other: 3 * price},
    }
    fast = SpareReplicas(Follows(), period, **kw)  # type: ignore[arg-type]
    ref = ReferenceNoise(Follows(), period, **kw)  # type: ignore[arg-type]
    for k, rps in enumerate(rates):
        for fleet, r in ((FLEET, rps), (other, rps / 4 + (k % 3))):
            sig = ReplicaSignals(k * period, 5, 0, period, r, r / 10.0, 0, r / 10.0)
            a, b = fast.decide(sig, fleet), ref.decide(sig, fleet)
            assert a == b, k


# ---------------------------------------------------------------- session 13: the serving tick
@settings(max_examples=60, deadline=None)
@given(
    step_days=st.integers(1, 8),
    rates=st.lists(st.floats(0.5, 500.0), min_size=30, max_size=300),
)
def test_slot_logs_are_the_log_of_the_slot_jumps(step_days: int, rates: list[float]) -> None:
    """The step floor's per-slot log jumps, kept as jumps arrive and leave, are ``np.log`` of the slot's jumps
    (oldest first) after every decision: the sd and tail read the very array ``np.log(np.fromiter(h))`` gave."""
    period = 7200.0  # 12 slots a day: many days, hence evictions, in few periods
    sp = SpareReplicas(Follows(), period, step_days=step_days, step_min_days=1, price_usd_per_replica_h={FLEET: 2.0})
    for k, rps in enumerate(rates):
        sp.decide(ReplicaSignals(k * period, 1, 0, period, rps, rps / 10.0, 0, rps / 10.0), FLEET)
        for slot, h in sp._jumps[FLEET].items():
            want = np.log(np.fromiter(h, dtype=np.float64, count=len(h)))
            got = sp._slot_logs[FLEET][slot][: len(h)]
            np.testing.assert_array_equal(got, want, strict=True)
