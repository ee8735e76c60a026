"""A clairvoyant replica schedule for ``bench autoscale`` (row ``oracle``): NOT a causal policy.

It reads the whole trace, future included, and looks for the replica schedule with the fewest GPU-hours whose
SLO attainment is at least ``target``, then replays it through the same queue simulator as the policies. It
is an *analysis row*: how much any policy could save with perfect foresight under the same cold start, never
a baseline of the pass/fail check.

Rules of the schedule (the simulator's): the ready replica count changes at bucket boundaries (``bucket_s``, a
divisor of the cold start); a replica is requested ``cold_start_s`` before it is ready and billed from the
request; scale-down is instant; the replay starts with the same ready replicas as the other dynamic policies,
and none other can be ready before ``cold_start_s``.

Method (docs/autoscale.md, "Clairvoyant reference"):

1. *Misses per bucket and level, optimistic.* A fluid fleet of ``c`` replicas, constant over a bucket that
   starts with an empty queue, starts a request (``k`` replica-seconds of work ahead of it, arriving at ``t``)
   within the SLO iff ``c >= (k - A(s)) / (t + slo_s - s)`` for every step boundary ``s`` from the bucket's
   start to ``t`` (``A(s)``: work arrived before ``s``). ``misses[b, r]`` = requests of bucket ``b`` whose
   level is above ``r``. A queue left by earlier buckets only adds misses, so this is a lower bound of what a
   schedule with ``r`` ready in bucket ``b`` misses there (up to requests whose 2 s run past the bucket's
   end, served at the next bucket's level).
2. *Lagrangian dynamic programme* over buckets, state = ready replicas ``r``: cost ``r * bucket_s`` replica-
   seconds per bucket + ``lambda * misses[b, r]``; raising ``r`` costs ``cold_start_s`` per replica (its
   billed cold start), lowering is free. Holding through a gap shorter than a cold start is then cheaper than
   relaunching, and the DP's cost is exactly the GPU time of its schedule when replayed (billed fleet at ``t``
   = the largest ready count needed in ``[t, t + cold_start_s]``). ``lambda`` is bisected (log scale) for the
   cheapest schedule whose estimated misses fit a budget.
3. *Lower bound*: ``lower_bound_gpu_h`` = ``max_lambda (DP value - lambda * allowed misses)`` on the table of
   step 1: by weak duality, no bucket-aligned schedule meets ``target`` with fewer GPU-hours (within the
   approximation of step 1).
4. *Feasible schedule, checked by the simulator.* The estimate ignores queues carried between buckets, so a
   plan can miss more when replayed. Each replay teaches the table (a bucket misses at least what it missed at
   its level, and more at lower levels) and rescales the miss budget by ``allowed / true misses``; the cheapest
   plan the simulator shows at ``>= target`` is kept. Two searches: with the *no-overload floor* (every bucket
   keeps at least its mean load ready, so little queue is carried) and without it; the cheaper wins.
   Between the lower bound and this schedule lies the clairvoyant optimum (for bucket-aligned schedules).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpufleet.autoscale.baselines import StaticPolicy
from gpufleet.autoscale.policy_base import RatePolicy
from gpufleet.bench.autoscale_sim import START_EPS_S, Queue, SimResult, simulate
from gpufleet.bench.autoscale_traces import ArrivalTrace
from gpufleet.domain.errors import ValidationError
from gpufleet.domain.workloads import ServingScaling
from gpufleet.ports import ReplicaAutoscaler, ReplicaDecision, ReplicaSignals

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
LAMBDA_MAX = 1e15  # replica-seconds per miss: above any fleet's cost, so the plan minimises misses first


@dataclass(frozen=True, slots=True)
class OracleSettings:
    """Knobs of the clairvoyant schedule (defaults: under 1 s on the Azure hour, ~30 s on a 14-day series at 1 s
    steps on a 2-core machine)."""

    target: float = 0.99
    bucket_s: float = 10.0  # finest bucket; raised for long traces so that there are at most max_buckets
    max_buckets: int = 30_000
    iterations: int = 4  # replays through the simulator per search (two searches: with and without the floor)
    bisection_steps: int = 24

    def __post_init__(self) -> None:
        if not 0.0 < self.target <= 1.0:
            raise ValidationError("oracle_target", f"must be in (0, 1], got {self.target}")
        if self.bucket_s <= 0 or self.max_buckets < 1 or self.iterations < 1:
            raise ValidationError("oracle_bucket_s", "bucket_s, max_buckets and iterations must be > 0")


@dataclass(frozen=True, slots=True)
class OracleRun:
    """The clairvoyant schedule and what the simulator measured for it."""

    result: SimResult  # the real simulator's replay of ``ready``
    ready: I64  # ready replicas per bucket
    bucket_s: float
    lam: float  # replica-seconds one estimated miss is worth in the chosen schedule
    est_attainment: float  # the DP's estimate for the chosen schedule (table as learned)
    lower_bound_gpu_h: float  # Lagrangian lower bound (module docstring, 3)
    replays: int
    feasible: bool  # the simulator shows >= target
    floor: bool  # the chosen schedule came from the search with the no-overload floor


class SchedulePolicy(RatePolicy):
    """Replays a precomputed schedule of billed replicas (one value per bucket); 0 after its end."""

    def __init__(self, desired: list[int], period_s: float, name: str = "oracle") -> None:
        self.name = name
        self.period_s = period_s
        self._desired = desired

    def decide(self, signals: ReplicaSignals, scaling: ServingScaling | None = None) -> ReplicaDecision:
        i = round(signals.now_s / self.period_s)
        d = self._desired[i] if 0 <= i < len(self._desired) else 0
        return ReplicaDecision(d, "clairvoyant_schedule")


class WarmStartPolicy(RatePolicy):
    """Analysis wrapper: ``inner`` decides, but the fleet is at least ``replicas`` until ``until_s``.

    With ``initial_replicas = replicas`` in the simulator this is a causal policy that starts already warm
    at that size (e.g. static_peak's) for its first minutes; the inner policy observes every period as usual.
    """

    def __init__(self, inner: ReplicaAutoscaler, replicas: int, until_s: float, name: str) -> None:
        self.name = name
        self.period_s = inner.period_s
        self._inner = inner
        self._replicas = replicas
        self._until_s = until_s

    def decide(self, signals: ReplicaSignals, scaling: ServingScaling) -> ReplicaDecision:
        d = self._inner.decide(signals, scaling)
        if signals.now_s < self._until_s and d.desired < self._replicas:
            return ReplicaDecision(self._replicas, "warm_start", forecast=d.forecast)
        return d


def choose_bucket_s(duration_s: float, step_s: float, cold_start_s: float, st: OracleSettings) -> float:
    """The finest bucket >= ``st.bucket_s`` (and >= duration / max_buckets) that divides the cold start and is a
    whole number of steps (a launch then lands on a bucket boundary)."""
    want = max(st.bucket_s, duration_s / st.max_buckets, step_s)
    cold_steps = round(cold_start_s / step_s)
    if cold_steps <= 0:
        return max(1, math.ceil(want / step_s - 1e-9)) * step_s
    for k in range(max(1, math.floor(cold_start_s / want + 1e-9)), 0, -1):
        if cold_steps % k == 0:
            return cold_steps // k * step_s
    return cold_steps * step_s


def request_levels(trace: ArrivalTrace, slo_s: float, bucket_s: float) -> tuple[F64, F64, F64]:
    """(arrival time, weight, level) of every request (request traces) or step of arrivals (rate traces):
    level = the fewest replicas (real-valued) that start it within ``slo_s`` when its bucket started with an
    empty queue (module docstring, 1)."""
    dt = trace.step_s
    per = max(1, round(bucket_s / dt))
    a0 = np.concatenate([[0.0], np.cumsum(trace.work_s)])  # work arrived before each step boundary
    if trace.req_t_s is not None and trace.req_work_s is not None:
        t = trace.req_t_s
        k = np.cumsum(trace.req_work_s) - trace.req_work_s + np.minimum(trace.req_work_s, START_EPS_S)
        w = np.ones(len(t))
        j0 = np.minimum((t / dt).astype(np.int64), len(trace.count) - 1)
    else:
        j0 = np.flatnonzero(trace.count > 0)
        t = np.asarray((j0 + 0.5) * dt, np.float64)
        k = a0[j0] + 0.5 * trace.work_s[j0]
        w = trace.count[j0].astype(np.float64)
    first = j0 // per * per  # the bucket's first step
    tau = t + slo_s
    level = np.zeros(len(t))
    for m in range(per):
        b = np.maximum(j0 - m, first)
        level = np.maximum(level, (k - a0[b]) / (tau - b * dt))
    return t, w, np.maximum(level, 0.0)


def miss_table(trace: ArrivalTrace, slo_s: float, bucket_s: float, n_buckets: int, max_replicas: int) -> F64:
    """``misses[b, r]``: requests arriving in bucket ``b`` that ``r`` replicas miss if it starts empty."""
    t, w, level = request_levels(trace, slo_s, bucket_s)
    need = np.minimum(np.ceil(level - 1e-9), max_replicas + 1).astype(np.int64)
    top = int(need.max()) if len(need) else 0
    r1 = top + 1
    b = np.minimum((t / bucket_s + 1e-9).astype(np.int64), n_buckets - 1)
    hist = np.bincount(b * r1 + need, weights=w, minlength=n_buckets * r1).reshape(n_buckets, r1)
    total = hist.sum(axis=1, keepdims=True)
    out = total - np.cumsum(hist, axis=1)
    return np.asarray(out[:, : min(top, max_replicas) + 1], dtype=np.float64)


@dataclass(frozen=True, slots=True)
class _Plan:
    ready: I64
    est_misses: float
    cost_s: float  # replica-seconds of the schedule (DP's accounting = its billed GPU time)
    value: float  # DP optimum: cost_s + lam * est_misses
    lam: float


def _dp(misses: F64, floor: I64, lam: float, bucket_s: float, cold_b: int, cold_s: float, init: int) -> _Plan:
    """Cheapest ready schedule for cost r * bucket_s + lam * misses[b, r] + cold_s per replica added, with at
    least ``floor[b]`` ready in bucket ``b``."""
    nb, r1 = misses.shape
    ar = np.arange(r1, dtype=np.float64)
    stage_base = ar * bucket_s
    v = np.full(r1, np.inf)
    v[min(init, r1 - 1)] = 0.0
    vs = np.empty((nb, r1))
    climb = cold_s * ar
    for b in range(nb):
        best = np.minimum.accumulate(v[::-1])[::-1]  # come down (or stay) from r >= r'
        if b >= cold_b:  # launched at t_b - cold_s >= 0
            best = np.minimum(best, np.minimum.accumulate(v - climb) + climb)
        v = best + stage_base + lam * misses[b]
        v[: floor[b]] = np.inf
        vs[b] = v
    ready = np.empty(nb, dtype=np.int64)
    r = int(np.argmin(vs[-1]))
    value = float(vs[-1, r])
    for b in range(nb - 1, -1, -1):
        ready[b] = r
        if b == 0:
            break
        prev = vs[b - 1]
        step = np.where(ar >= r, 0.0, (r - ar) * cold_s if b >= cold_b else np.inf)
        r = int(np.argmin(prev + step))
    est = float(misses[np.arange(nb), ready].sum())
    ups = np.maximum(np.diff(np.concatenate([[min(init, r1 - 1)], ready])), 0)
    cost = float(ready.sum() * bucket_s + ups.sum() * cold_s)
    return _Plan(ready, est, cost, value, lam)


def _billed(ready: I64, cold_b: int) -> list[int]:
    """Billed replicas per bucket: the largest ready count needed within the next cold start."""
    nb = len(ready)
    pad = np.concatenate([ready, np.zeros(cold_b, dtype=np.int64)])
    out = ready.copy()
    for d in range(1, cold_b + 1):
        out = np.maximum(out, pad[d : d + nb])
    return [int(x) for x in out]


def oracle(
    trace: ArrivalTrace,
    *,
    cold_start_s: float,
    slo_s: float,
    gpus_per_replica: int,
    initial_replicas: int,
    st: OracleSettings | None = None,
    max_replicas: int = 10_000,
) -> OracleRun:
    """The clairvoyant schedule of the module docstring, replayed by the simulator."""
    st = st or OracleSettings()
    dt = trace.step_s
    bucket_s = choose_bucket_s(trace.duration_s, dt, cold_start_s, st)
    cold_b = round(cold_start_s / bucket_s)
    nb = max(1, math.ceil((trace.duration_s + slo_s) / bucket_s - 1e-9))
    est = miss_table(trace, slo_s, bucket_s, nb, max_replicas)
    per = round(bucket_s / dt)
    work = np.pad(trace.work_s, (0, max(0, nb * per - len(trace.work_s))))[: nb * per].reshape(nb, per).sum(axis=1)
    floor = np.minimum(np.ceil(work / bucket_s - 1e-9), max_replicas).astype(np.int64)
    floor[:cold_b] = 0  # nothing can be launched and ready before a cold start
    width = max(est.shape[1], initial_replicas + 1, int(floor.max()) + 1)
    est = np.pad(est, ((0, 0), (0, width - est.shape[1])))  # the initial fleet and the floors are states
    levels = np.arange(width)
    no_floor = np.zeros(nb, dtype=np.int64)
    n_req = float(trace.count.sum())
    allowed = math.floor((1.0 - st.target) * n_req + 1e-9)

    def dp(table: F64, fl: I64, lam: float) -> _Plan:
        return _dp(table, fl, lam, bucket_s, cold_b, cold_start_s, initial_replicas)

    def solve(table: F64, fl: I64, budget: float, lam0: float) -> tuple[_Plan, float, list[_Plan]]:
        """Cheapest DP plan with estimated misses <= budget: bracket lambda from lam0, then bisect (log)."""
        seen: list[_Plan] = []
        lo, hi = 0.0, lam0
        plan_hi = dp(table, fl, hi)
        seen.append(plan_hi)
        if plan_hi.est_misses <= budget + 1e-9:
            while hi > 1e-6:  # walk down to a lambda that does not fit
                p = dp(table, fl, hi / 4.0)
                seen.append(p)
                if p.est_misses > budget + 1e-9:
                    lo = hi / 4.0
                    break
                hi, plan_hi = hi / 4.0, p
        else:
            while hi < LAMBDA_MAX:
                lo, hi = hi, hi * 4.0
                plan_hi = dp(table, fl, hi)
                seen.append(plan_hi)
                if plan_hi.est_misses <= budget + 1e-9:
                    break
        for _ in range(st.bisection_steps):
            if lo <= 0 or hi / lo < 1.02:
                break
            mid = math.sqrt(lo * hi)
            p = dp(table, fl, mid)
            seen.append(p)
            if p.est_misses <= budget + 1e-9:
                hi, plan_hi = mid, p
            else:
                lo = mid
        return plan_hi, hi, seen

    # the lower bound: weak duality on the optimistic table, no floor
    first_free = solve(est, no_floor, float(allowed), bucket_s)  # also the first plan of the no-floor search
    probes = first_free[2]
    lower = max([0.0] + [p.value - p.lam * allowed for p in probes])

    best: tuple[SimResult, _Plan, float, bool] | None = None
    fallback: tuple[SimResult, _Plan, float, bool] | None = None
    replays = 0
    for fl in (floor, no_floor):
        table = est.copy()
        least = dp(table, fl, LAMBDA_MAX).est_misses  # the fewest estimated misses any schedule has
        budget, lam = float(allowed), bucket_s
        tried: set[bytes] = set()
        for it in range(st.iterations):
            if it == 0 and fl is no_floor and least <= allowed:
                plan, lam, _ = first_free
            else:
                plan, lam, _ = solve(table, fl, max(budget, least), lam)
            key = plan.ready.tobytes()
            if key in tried:
                break
            tried.add(key)
            res = simulate(
                trace,
                SchedulePolicy(_billed(plan.ready, cold_b), bucket_s),
                cold_start_s=cold_start_s,
                slo_s=slo_s,
                gpus_per_replica=gpus_per_replica,
                initial_replicas=initial_replicas,
                split_s=bucket_s,
            )
            replays += 1
            true_miss = round(n_req - res.slo_attainment * n_req)
            ok = res.slo_attainment >= st.target - 1e-12
            floored = fl is floor
            if ok and (best is None or res.gpu_hours < best[0].gpu_hours):
                best = (res, plan, lam, floored)
            if fallback is None or res.slo_attainment > fallback[0].slo_attainment:
                fallback = (res, plan, lam, floored)
            if ok and allowed - true_miss <= max(1.0, 0.02 * allowed):
                break
            # learn from the replay: at its level (and any lower one) a bucket misses at least what it missed
            got = (res.split_requests - res.split_met)[:nb]
            got = np.pad(got, (0, nb - len(got)))
            below = levels[None, :] <= plan.ready[:, None]
            table = np.where(below, np.maximum(table, got[:, None]), table)
            # and rescale the budget by the estimate's error on this plan (at most 2x either way)
            budget = float(math.floor(budget * min(2.0, max(0.5, allowed / max(true_miss, 1.0)))))
    chosen = best or fallback
    assert chosen is not None
    res, plan, lam, floored = chosen
    return OracleRun(
        result=res,
        ready=plan.ready,
        bucket_s=bucket_s,
        lam=lam,
        est_attainment=1.0 - plan.est_misses / n_req if n_req else 1.0,
        lower_bound_gpu_h=lower * gpus_per_replica / 3600.0,
        replays=replays,
        feasible=best is not None,
        floor=floored,
    )


def trace_window(trace: ArrivalTrace, start_s: float, end_s: float) -> ArrivalTrace:
    """The arrivals of ``trace`` in ``[start_s, end_s)``, re-timed to start at 0 (whole steps)."""
    a = max(0, int(start_s / trace.step_s + 1e-9))
    b = max(a, min(len(trace.count), int(end_s / trace.step_s + 1e-9)))
    req_t, req_w = trace.req_t_s, trace.req_work_s
    if req_t is not None and req_w is not None:
        keep = (req_t >= a * trace.step_s) & (req_t < b * trace.step_s)
        req_t, req_w = req_t[keep] - a * trace.step_s, req_w[keep]
    return ArrivalTrace(
        trace.trace_id, trace.step_s, trace.count[a:b], trace.work_s[a:b], trace.mean_work_s, req_t, req_w
    )


def held_fleet_misses(
    trace: ArrivalTrace,
    start_s: float,
    end_s: float,
    *,
    slo_s: float,
    gpus_per_replica: int = 1,
    queue: Queue = "batched",
    max_replicas: int = 64,
) -> list[int]:
    """Analysis (what a burst needed): ``out[k - 1]`` = SLO misses among the requests of ``[start_s, end_s)`` when
    ``k`` replicas are ready throughout it (empty queue at ``start_s``, nothing launched), for ``k`` = 1, 2, ... up
    to the first ``k`` that misses none (or ``max_replicas``). A causal policy serves a burst shorter than a cold
    start only with what it held when the burst began, so this is what it had to hold, whatever it does later."""
    part = trace_window(trace, start_s, end_s)
    if int(part.count.sum()) == 0:
        return [0]  # no request in the window: one replica (any) misses none
    out: list[int] = []
    for k in range(1, max_replicas + 1):
        r = simulate(
            part,
            StaticPolicy(k),
            cold_start_s=0.0,
            slo_s=slo_s,
            gpus_per_replica=gpus_per_replica,
            initial_replicas=k,
            queue=queue,
        )
        out.append(r.requests - round(r.slo_attainment * r.requests))
        if out[-1] == 0:
            break
    return out
