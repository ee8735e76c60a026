"""``gpufleet bench autoscale``: the replica policies on one trace, same queue model, same run.

Every policy is sized from the same numbers: the token-throughput model gives the rps one replica serves at
100% busy for the trace's mean request (``rps_per_replica``), and ``target_utilization`` (shared) turns that
into the per-replica target. No parameter depends on which trace is replayed.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gpufleet.autoscale.baselines import HpaPolicy, KpaPolicy, StaticPolicy
from gpufleet.autoscale.loop_adapters import PredictiveReplicas
from gpufleet.autoscale.throughput import ReplicaThroughputModel
from gpufleet.bench.autoscale_oracle import OracleRun, OracleSettings, WarmStartPolicy, oracle
from gpufleet.bench.autoscale_requests import RequestColumns, load_request_csv
from gpufleet.bench.autoscale_sim import QUEUES, Queue, SimResult, bench_scaling, simulate
from gpufleet.bench.autoscale_traces import ArrivalTrace, load_traces
from gpufleet.domain.catalog import PRICES_BY_SKU
from gpufleet.domain.errors import ValidationError
from gpufleet.domain.workloads import ServingScaling
from gpufleet.ports import ReplicaAutoscaler

POLICIES = ("gpufleet", "static_peak", "hpa", "kpa")
EARLY_S = 900.0  # "the first 15 minutes" columns: where a causal policy has no history yet


MAX_SETTING_S = 86_400.0  # a cold start, SLO or warm start longer than a day is a typo


@dataclass(frozen=True, slots=True)
class BenchSettings:
    """Knobs of one benchmark run (defaults are the issue's: 120 s cold start, 2 s SLO)."""

    cold_start_s: float = 120.0
    slo_s: float = 2.0
    target_utilization: float = 0.8
    seed: int = 0
    max_replicas: int = 10_000
    peak_window_s: float = 60.0
    static_attainment: float = 0.99  # static_peak: the fewest replicas meeting this in every hour
    oracle: bool = True  # add the clairvoyant reference row (analysis only, never a baseline)
    oracle_target: float = 0.99  # the oracle's attainment constraint (the target)
    warm_start_min: tuple[float, ...] = ()  # analysis rows: gpufleet held at static_peak's size this long
    # service model of a replica: "batched" (continuous batching, fluid) or "exclusive" (one request per
    # replica at a time; per-request traces only). The oracle's miss table is the batched pool's: no oracle
    # row with "exclusive".
    queue: Queue = "batched"

    def __post_init__(self) -> None:
        # `not (x >= 0)` and friends: NaN fails every comparison, so it is refused too
        if not 0 <= self.cold_start_s <= MAX_SETTING_S:
            raise ValidationError("cold_start_s", f"must be in [0, {MAX_SETTING_S:g}] s, got {self.cold_start_s}")
        if not 0 < self.slo_s <= MAX_SETTING_S:
            raise ValidationError("slo_s", f"must be in (0, {MAX_SETTING_S:g}] s, got {self.slo_s}")
        if not 0.05 <= self.target_utilization <= 1.0:
            raise ValidationError("target_utilization", f"must be in [0.05, 1], got {self.target_utilization}")
        if self.seed < 0:
            raise ValidationError("seed", f"must be >= 0, got {self.seed}")
        if self.queue not in QUEUES:
            raise ValidationError("queue", f"must be one of {', '.join(QUEUES)}, got {self.queue!r}")
        for m in self.warm_start_min:
            if not 0 <= m <= MAX_SETTING_S / 60:
                raise ValidationError("warm_start_min", f"must be in [0, {MAX_SETTING_S / 60:g}] minutes, got {m}")


@dataclass(frozen=True, slots=True)
class TraceRun:
    trace: ArrivalTrace
    rps_per_replica: float
    static_replicas: int
    results: dict[str, SimResult]
    wall_s: dict[str, float]
    # analysis rows (not causal or not defaults): never baselines of the done-when check
    analysis: dict[str, SimResult] = field(default_factory=dict)
    oracle: OracleRun | None = None
    # gpufleet under other settings (``bench generalize``'s candidates): setting name -> its run
    settings: dict[str, SimResult] = field(default_factory=dict)


def peak_rps(trace: ArrivalTrace, window_s: float) -> float:
    """Highest mean arrival rate over any ``window_s`` window (the static fleet is sized for it)."""
    w = max(1, round(window_s / trace.step_s))
    c = np.concatenate([[0], np.cumsum(trace.count)])
    if len(c) - 1 <= w:
        return float(c[-1]) / max(trace.duration_s, trace.step_s)
    return float(np.max(c[w:] - c[:-w])) / (w * trace.step_s)


def rate_peak_replicas(trace: ArrivalTrace, rps_per_replica: float, st: BenchSettings) -> int:
    """Replicas that carry the peak ``peak_window_s`` window's rate at the target utilization (the start of
    the static_peak search; on its own it ignores burstiness below ``peak_window_s``)."""
    target_rps = st.target_utilization * rps_per_replica
    return max(1, math.ceil(peak_rps(trace, st.peak_window_s) / target_rps - 1e-9))


def static_peak_replicas(
    trace: ArrivalTrace, rps_per_replica: float, st: BenchSettings, gpus_per_replica: int = 1
) -> int:
    """The fewest constant replicas that meet the SLO at the peak: attainment >= ``static_attainment`` in
    every hour of the trace (same queue model), found by doubling from the rate rule then bisection
    (attainment does not decrease with more replicas)."""

    def meets(n: int) -> bool:
        r = simulate(
            trace,
            StaticPolicy(n),
            cold_start_s=0.0,
            slo_s=st.slo_s,
            gpus_per_replica=gpus_per_replica,
            initial_replicas=n,
            queue=st.queue,
        )
        return r.worst_hour_slo >= st.static_attainment - 1e-12

    hi = rate_peak_replicas(trace, rps_per_replica, st)
    lo = 0
    while not meets(hi):
        lo, hi = hi, 2 * hi
        if hi > st.max_replicas:
            raise ValidationError("static_peak", f"no fleet up to {st.max_replicas} replicas meets the SLO")
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if meets(mid):
            hi = mid
        else:
            lo = mid
    return hi


def replica_price_usd_h(gpus_per_replica: int) -> float:
    """On-demand list price of one replica: ``gpus_per_replica`` H100s (the token model's GPU)."""
    return gpus_per_replica * float(PRICES_BY_SKU["h100_80gb"].on_demand)


def build_policies(
    rps_per_replica: float,
    static_n: int,
    st: BenchSettings,
    gpus_per_replica: int = 4,
    options: dict[str, Any] | None = None,
) -> dict[str, ReplicaAutoscaler]:
    """The four policies of the issue, sized from the same throughput model and target utilization; the
    replica's price (gpufleet's scale-to-zero rule weighs it) is its GPUs' on-demand price. gpufleet is
    :class:`~gpufleet.autoscale.loop_adapters.PredictiveReplicas` and hpa :class:`HpaPolicy`: the very objects
    ``ControlLoop.gpufleet`` and ``ControlLoop.baseline`` hold, here deciding every 5 s (gpufleet) and 15 s (hpa)
    for the fleet of :func:`fleet_scaling`. ``options``: gpufleet config fields (a setting of ``bench generalize``)."""
    # an exclusive replica serves one request at a time: gpufleet and kpa are told so (containerConcurrency 1)
    one_at_a_time = st.queue == "exclusive"
    gf = PredictiveReplicas(
        5.0,
        st.target_utilization,
        slo_s=st.slo_s,
        max_concurrency=1 if one_at_a_time else None,
        price_usd_per_replica_h=replica_price_usd_h(gpus_per_replica),
        options=options,
    )
    target_rps = st.target_utilization * rps_per_replica
    kpa = (
        KpaPolicy(target_rps_per_replica=st.target_utilization, max_replicas=st.max_replicas, metric="concurrency")
        if one_at_a_time
        else KpaPolicy(target_rps_per_replica=target_rps, max_replicas=st.max_replicas)
    )
    return {
        "gpufleet": gf,
        "static_peak": StaticPolicy(static_n),
        "hpa": HpaPolicy(target_utilization=st.target_utilization),
        "kpa": kpa,
    }


def fleet_scaling(rps_per_replica: float, st: BenchSettings) -> ServingScaling:
    """The serving fleet every policy of a run scales: 0 to ``max_replicas``, ``rps_per_replica`` at 100% busy."""
    return bench_scaling(rps_per_replica, st.max_replicas, st.cold_start_s)


def run_trace(
    trace: ArrivalTrace,
    model: ReplicaThroughputModel,
    st: BenchSettings,
    policies: tuple[str, ...] = POLICIES,
    options: dict[str, Any] | None = None,
    settings: dict[str, dict[str, Any]] | None = None,
) -> TraceRun:
    """Every policy on ``trace``; ``options``: gpufleet's config fields; ``settings``: further gpufleet runs, one per
    named set of options (same trace, fleet and start), reported in ``TraceRun.settings``."""
    rps_per_replica = model.rps_per_replica(trace.mean_work_s)
    static_n = static_peak_replicas(trace, rps_per_replica, st, model.gpus_per_replica)
    built = build_policies(rps_per_replica, static_n, st, model.gpus_per_replica, options)
    scaling = fleet_scaling(rps_per_replica, st)
    # every dynamic policy starts where the static fleet would be sized for the first minute's load
    first = trace.count[: max(1, round(60.0 / trace.step_s))].sum() / 60.0
    init = max(1, math.ceil(first / (st.target_utilization * rps_per_replica)))
    results: dict[str, SimResult] = {}
    wall: dict[str, float] = {}
    for name in policies:
        t0 = time.perf_counter()
        results[name] = simulate(
            trace,
            built[name],
            cold_start_s=st.cold_start_s,
            slo_s=st.slo_s,
            gpus_per_replica=model.gpus_per_replica,
            initial_replicas=static_n if name == "static_peak" else init,
            queue=st.queue,
            scaling=scaling,
        )
        wall[name] = time.perf_counter() - t0
    variants: dict[str, SimResult] = {}
    for sname, opts in (settings or {}).items():
        t0 = time.perf_counter()
        variants[sname] = simulate(
            trace,
            build_policies(rps_per_replica, static_n, st, model.gpus_per_replica, {**(options or {}), **opts})[
                "gpufleet"
            ],
            cold_start_s=st.cold_start_s,
            slo_s=st.slo_s,
            gpus_per_replica=model.gpus_per_replica,
            initial_replicas=init,
            queue=st.queue,
            scaling=scaling,
        )
        wall[f"gpufleet[{sname}]"] = time.perf_counter() - t0
    analysis: dict[str, SimResult] = {}
    orc: OracleRun | None = None
    if st.oracle and st.queue == "batched":
        t0 = time.perf_counter()
        orc = oracle(
            trace,
            cold_start_s=st.cold_start_s,
            slo_s=st.slo_s,
            gpus_per_replica=model.gpus_per_replica,
            initial_replicas=init,
            st=OracleSettings(target=st.oracle_target),
            max_replicas=st.max_replicas,
        )
        analysis["oracle"] = orc.result
        wall["oracle"] = time.perf_counter() - t0
    for minutes in st.warm_start_min:
        name = f"gpufleet_warm_{minutes:g}min"
        inner = build_policies(rps_per_replica, static_n, st, model.gpus_per_replica, options)["gpufleet"]
        t0 = time.perf_counter()
        analysis[name] = simulate(
            trace,
            WarmStartPolicy(inner, static_n, 60.0 * minutes, name),
            cold_start_s=st.cold_start_s,
            slo_s=st.slo_s,
            gpus_per_replica=model.gpus_per_replica,
            initial_replicas=static_n,
            queue=st.queue,
            scaling=scaling,
        )
        wall[name] = time.perf_counter() - t0
    return TraceRun(trace, rps_per_replica, static_n, results, wall, analysis, orc, variants)


def run(
    path: str | Path,
    *,
    st: BenchSettings,
    model: ReplicaThroughputModel | None = None,
    series_id: str | None = None,
    impute_gaps: bool = True,
    requests: RequestColumns | None = None,
    options: dict[str, Any] | None = None,
    settings: dict[str, dict[str, Any]] | None = None,
) -> list[TraceRun]:
    """Load the trace(s) and run every policy. With ``requests`` the file is a per-request trace with a
    measured service time (work = that column's replica-seconds; the token model only gives the replica
    size, ``model.gpus_per_replica``); without it, the Azure request format or a rate series."""
    m = model or ReplicaThroughputModel()
    if requests is not None:
        if series_id is not None:
            raise ValidationError("series", "a per-request CSV has no series to choose (use --where or --group)")
        traces = load_request_csv(path, requests)
    else:
        traces = load_traces(path, model=m, seed=st.seed, series_id=series_id, impute_gaps=impute_gaps)
    if st.queue == "exclusive" and any(t.req_t_s is None for t in traces):
        raise ValidationError(
            "queue",
            "the exclusive queue replays each request on one replica: it needs per-request arrivals (the Azure "
            "format or a per-request CSV with --time-column), and this file is a rate series",
            str(path),
        )
    return [run_trace(t, m, st, options=options, settings=settings) for t in traces]


def _row(r: SimResult) -> dict[str, Any]:
    return {
        "gpu_hours": round(r.gpu_hours, 3),
        "slo_attainment": round(r.slo_attainment, 6),
        "cold_starts": r.cold_starts,
    }


def to_json(run_: TraceRun) -> dict[str, Any]:
    """The issue's JSON: ``{"trace": ID, "policies": {NAME: {gpu_hours, slo_attainment, cold_starts}}}``, plus
    ``"analysis"`` (when there are analysis rows): the same fields and ``"causal"`` for each; the clairvoyant
    ``oracle`` also has its ``lower_bound_gpu_hours``. ``policies`` holds only the four policies of the issue."""
    out: dict[str, Any] = {
        "trace": run_.trace.trace_id,
        "policies": {name: _row(r) for name, r in run_.results.items()},
    }
    if run_.analysis:
        out["analysis"] = {name: {**_row(r), "causal": name != "oracle"} for name, r in run_.analysis.items()}
        if run_.oracle is not None and "oracle" in out["analysis"]:
            out["analysis"]["oracle"]["lower_bound_gpu_hours"] = round(run_.oracle.lower_bound_gpu_h, 3)
    return out


def verdict(run_: TraceRun, min_attainment: float = 0.99, min_saving: float = 0.25) -> tuple[bool, str]:
    """The issue's done-when check for one trace, with the reason when it fails (the four policies of the
    issue only: the analysis rows - the clairvoyant oracle, warm starts - are never baselines)."""
    r = run_.results
    g, s = r["gpufleet"], r["static_peak"]
    saving = 1.0 - g.gpu_hours / s.gpu_hours if s.gpu_hours > 0 else 0.0
    others = [(n, x) for n, x in r.items() if n != "gpufleet" and x.slo_attainment >= min_attainment]
    beaten = all(g.gpu_hours < x.gpu_hours for _, x in others)
    ok = g.slo_attainment >= min_attainment and saving >= min_saving and beaten
    why = (
        f"attainment {g.slo_attainment:.4f}, {abs(saving):.1%} {'fewer' if saving >= 0 else 'more'} GPU-h than "
        "static_peak, "
        f"cheaper than every baseline at >= {min_attainment:.0%}: {beaten}"
    )
    return ok, why
