"""``gpufleet bench procure``: replay GPU demand series against every reservation policy in one run.

Input: a generic series CSV (timestamp, series_id, value in GPUs). Each series is averaged onto an hourly
grid; hours without any sample are filled with the previous hour (then the next, at the start).
A request-rate series can be converted to GPUs first (``rps_per_replica``/``gpus_per_replica``): at the
file's own resolution, ``gpus = gpus_per_replica * ceil(rps / rps_per_replica)`` (replicas are whole),
with ``rps <= 0`` read as a data gap when ``zero_is_gap`` (ServeGen's m-mid has such windows), together
with the near-zero samples at the edges of those windows (below 5 % of the local median).
"""

from __future__ import annotations

import csv
import io
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from gpufleet.adapters.inputs import read_input_text
from gpufleet.adapters.traces import Series, read_series_csv, resample_mean
from gpufleet.domain.catalog import BUILTIN_PRICE_CATALOG
from gpufleet.domain.errors import ValidationError
from gpufleet.domain.pools import CapacityPool, Tier
from gpufleet.ports import PriceCatalog, ProcurementContext, Procurer, ReservationProposal
from gpufleet.procure.baseline import on_demand_usd_per_gpu_h, whole_node_proposal
from gpufleet.procure.hindsight import hindsight_optimal
from gpufleet.procure.online import PortfolioProcurer
from gpufleet.procure.policies import baseline_policies, units_worth_committing
from gpufleet.procure.replay import ReplayConfig, ReplayResult, ReservationPolicy, replay

FloatArray = npt.NDArray[np.float64]
HOUR_S = 3600
POLICY_ORDER = ("gpufleet", "all_on_demand", "reserve_peak", "lookback_p50", "online_breakeven", "hindsight_optimal")


@dataclass(frozen=True, slots=True)
class RpsToGpus:
    """Request rate to GPUs: whole replicas of ``gpus_per_replica`` GPUs, each sustaining ``rps_per_replica``."""

    rps_per_replica: float
    gpus_per_replica: int
    zero_is_gap: bool = True
    edge_fraction: float = 0.05  # next to a gap, a sample below this share of the local median is the gap's edge

    def __post_init__(self) -> None:
        if not 0 < self.rps_per_replica < math.inf:
            raise ValidationError("rps_per_replica", f"must be a finite number > 0, got {self.rps_per_replica}")
        if self.gpus_per_replica < 1:
            raise ValidationError("gpus_per_replica", f"must be >= 1, got {self.gpus_per_replica}")

    def convert(self, s: Series) -> Series:
        v = s.values.astype(np.float64, copy=True)
        if self.zero_is_gap:
            v[v <= 0] = np.nan
            v = _drop_gap_edges(v, self.edge_fraction)
        gpus = self.gpus_per_replica * np.ceil(v / self.rps_per_replica - 1e-9)
        return Series(s.series_id, s.t_s, gpus)


def _drop_gap_edges(v: FloatArray, fraction: float, half_window: int = 72) -> FloatArray:
    """Mark as gaps the samples adjacent to a gap (recursively) that are below ``fraction`` of the local median.

    An exporter outage reads as 0 rps, and the windows it partly covers read as a tiny rate (ServeGen m-mid:
    ~14 rps next to 0-rps windows, against ~1,500 rps around them); those are data gaps too, not demand.
    The local median is over ``half_window`` samples either side (a day at 10-minute samples), gaps ignored.
    """
    out = v.copy()
    n = len(out)
    gap = np.isnan(out)
    if not np.any(gap) or np.all(gap):
        return out
    changed = True
    while changed:
        changed = False
        near = np.zeros(n, dtype=bool)
        near[1:] |= gap[:-1]
        near[:-1] |= gap[1:]
        cand = np.nonzero(near & ~gap)[0]
        for i in cand:
            window = out[max(0, i - half_window) : i + half_window + 1]
            med = float(np.nanmedian(window))
            if out[i] < fraction * med:
                out[i] = np.nan
                gap[i] = True
                changed = True
    return out


def hourly_demand(s: Series) -> FloatArray:
    """Hourly mean GPUs; empty hours take the previous hour's value (the next one's at the start)."""
    h = resample_mean(s, HOUR_S).values.copy()
    if np.all(np.isnan(h)):
        raise ValidationError("value", f"series {s.series_id!r} has no numeric values")
    idx = np.where(np.isnan(h), 0, np.arange(len(h)))
    np.maximum.accumulate(idx, out=idx)
    first = int(np.argmax(~np.isnan(h)))
    h = h[idx]
    h[:first] = h[first]
    if np.any(h < 0):
        raise ValidationError("value", f"series {s.series_id!r} has negative GPU demand")
    return h


MAX_POD_TRACE_H = 1_000_000  # ~114 years of hours: a longer pod trace is a bad timestamp


def pods_hourly_demand(path: str | Path, step_s: int = HOUR_S) -> FloatArray:
    """Hourly mean GPUs held by the pods of an OpenB pod list (creation/deletion seconds, num_gpu, gpu_milli);
    ``step_s``: the mean over steps of that many seconds instead (``bench generalize --forecast-step``).

    A single-GPU pod holds ``gpu_milli / 1000`` of a GPU; a multi-GPU pod holds ``num_gpu`` whole GPUs.
    Pods without a deletion time or GPUs are skipped. Step 0 starts at the trace's time 0.
    """
    reader = csv.DictReader(io.StringIO(read_input_text(path, "demand"), newline=""))
    need = ("creation_time", "deletion_time", "num_gpu", "gpu_milli")
    missing = [k for k in need if k not in (reader.fieldnames or ())]
    if missing:
        raise ValidationError("pods", f"not an OpenB pod list: no column {missing[0]!r}", str(path))
    cells: list[tuple[float, float, int, int]] = []
    for lineno, r in enumerate(reader, start=2):
        where = f"{path}:{lineno}"
        if None in r.values():  # a row cut short: DictReader fills the missing cells with None
            have = sum(v is not None for k, v in r.items() if k is not None)
            raise ValidationError("row", f"expected {len(reader.fieldnames or ())} fields, got {have}", where)
        key = "creation_time"
        try:
            c_i = float(r[key])
            key = "deletion_time"
            d_i = float(r[key] or "nan")
            key = "num_gpu"
            n_i = int(r[key])
            key = "gpu_milli"
            m_i = int(r[key] or 0)
        except ValueError:
            raise ValidationError(key, f"not a number: {r[key]!r}", where) from None
        for key, v in (("num_gpu", n_i), ("gpu_milli", m_i)):
            if abs(v) > 2**31 - 1:  # not a count of GPUs (and past NumPy's integers)
                raise ValidationError(key, f"out of range: {r[key]!r}", where)
        cells.append((c_i, d_i, n_i, m_i))
    c = np.array([x[0] for x in cells], dtype=np.float64)
    d = np.array([x[1] for x in cells], dtype=np.float64)
    n = np.array([x[2] for x in cells], dtype=np.int64)
    milli = np.array([x[3] for x in cells], dtype=np.int64)
    g = np.where(n == 1, milli / 1000.0, n.astype(np.float64))
    ok = np.isfinite(c) & np.isfinite(d) & (g > 0) & (d > c)
    c, d, g = c[ok], d[ok], g[ok]
    if len(c) and (c.min() < 0 or d.max() > MAX_POD_TRACE_H * HOUR_S):
        raise ValidationError("creation_time", f"pod times must be seconds in 0..{MAX_POD_TRACE_H:,} h", str(path))
    if step_s < 1:
        raise ValidationError("step_s", f"must be >= 1 s, got {step_s}")
    n_h = int(np.ceil(d.max() / step_s)) if len(d) else 0
    if n_h == 0:
        raise ValidationError("pods", "no pod holds a GPU", str(path))
    # GPU-seconds by step from piecewise-linear cumulative usage: a pod adds g per second on [c, d)
    edges = np.arange(n_h + 1, dtype=np.float64) * step_s
    # cumulative GPU-seconds up to each edge = sum g * clip(edge - c, 0, d - c); evaluated with sorted events
    order_c, order_d = np.argsort(c), np.argsort(d)
    cs, gc = c[order_c], g[order_c]
    ds, gd = d[order_d], g[order_d]
    cum_g_c, cum_gc_c = np.concatenate([[0], np.cumsum(gc)]), np.concatenate([[0], np.cumsum(gc * cs)])
    cum_g_d, cum_gd_d = np.concatenate([[0], np.cumsum(gd)]), np.concatenate([[0], np.cumsum(gd * ds)])
    ic, id_ = np.searchsorted(cs, edges, "right"), np.searchsorted(ds, edges, "right")
    # started pods contribute g*(edge - c); finished pods give back g*(edge - d)
    used = (cum_g_c[ic] * edges - cum_gc_c[ic]) - (cum_g_d[id_] * edges - cum_gd_d[id_])
    out: FloatArray = np.diff(used) / step_s
    return out


def load_demand(
    path: str | Path,
    *,
    series_id: str | None = None,
    convert: RpsToGpus | None = None,
    check_id: Callable[[str], object] | None = None,
    nonnegative: bool = False,
) -> dict[str, FloatArray]:
    """Read, optionally convert, and aggregate to hourly GPUs; one array per series. ``check_id`` refuses a
    series id with its file and line (``gpufleet plan`` passes the planner's ``sku@region`` check), and
    ``nonnegative`` a negative value with its file and line (``gpufleet plan``: the file is GPU demand).

    A file whose header has ``creation_time`` and ``deletion_time`` is read as an OpenB pod list
    (series id ``pods``) with :func:`pods_hourly_demand`.
    """
    header = read_input_text(path, "demand").partition("\n")[0]
    if "creation_time" in header and "deletion_time" in header:
        return {"pods": pods_hourly_demand(path)}
    all_series = read_series_csv(path, check_id=check_id, nonnegative=nonnegative)
    if series_id is not None:
        if series_id not in all_series:
            raise ValidationError("series", f"{series_id!r} not in file (has {sorted(all_series)})", str(path))
        all_series = {series_id: all_series[series_id]}
    out: dict[str, FloatArray] = {}
    for sid, s in all_series.items():
        try:
            out[sid] = hourly_demand(convert.convert(s) if convert else s)
        except ValidationError as exc:
            raise ValidationError(exc.field, exc.message, exc.location or str(path)) from None
    return out


def _ratio(cost_usd: float, opt_usd: float) -> float | None:
    """Cost over the bound; 1.0 when both are zero; None (JSON null) when only the bound is zero."""
    if opt_usd > 0:
        return round(cost_usd / opt_usd, 4)
    return 1.0 if cost_usd <= 0 else None


def _row(res: ReplayResult, opt_usd: float, wall_s: float) -> dict[str, float | None]:
    return {
        "cost_usd": round(res.cost_usd, 2),
        "ratio_to_optimal": _ratio(res.cost_usd, opt_usd),
        "unmet_gpu_h": round(res.unmet_gpu_h, 3),
        "unmet_cost_usd": round(res.cost_by_tier_usd.get("unmet", 0.0), 2),
        "reserved_utilization": round(res.reserved_utilization, 4),
        "on_demand_gpu_h": round(res.gpu_h_by_tier.get("on_demand", 0.0), 1),
        "wall_s": round(wall_s, 3),
    }


@dataclass(slots=True)
class ProcurerPolicy:
    """A control-loop ``Procurer`` replayed hour by hour: the bench measures the object the loop runs.

    Every ``every_h`` hours (default: every hour, as the replay asks every policy) it gets the context the simulator
    builds (one reserved pool at the replay's reserved price, lead time and term, the observed demand, the capacity
    committed at the lead time; no forecast, whole GPUs) and its proposals are committed now.
    """

    procurer: Procurer
    name: str
    every_h: int = 1
    sku_id: str = "h100_80gb"

    def decide(self, t: int, history: FloatArray, committed: FloatArray, cfg: ReplayConfig) -> float:
        if t % self.every_h:
            return 0.0
        pool = CapacityPool(
            id="bench-reserved",
            provider_id="aws",
            region_id="bench",
            sku_id=self.sku_id,
            tier=Tier.RESERVED,
            price_usd_per_gpu_h=Decimal(str(cfg.reserved_usd_per_gpu_h)),
            term_months=max(round(cfg.term_h / 730), 1),
            lead_time_s=cfg.lead_h * HOUR_S,
        )
        have = math.floor(float(committed[cfg.lead_h]) + 1e-9)
        ctx = ProcurementContext(t * HOUR_S, self.sku_id, pool, history, None, have, 1, term_h=cfg.term_h)
        return float(sum(p.units for p in self.procurer.propose(ctx)))


@dataclass(slots=True)
class BreakevenProcurer:
    """The break-even rule as a loop ``Procurer`` (the loop's procurer until issue 15; now the named baseline of the
    closed-loop procurement benchmark): scenarios for the term a new reservation would cover (the same hour of day
    on the freshest observed days, damped trend, plus the forecaster's quantiles tiled over the term), whole nodes
    while the next GPU's expected use reaches the break-even and the first covered hour needs it. Never proposes
    before ``min_history_h`` hours of history."""

    min_history_h: int = 7 * 24
    max_term_h: int = 90 * 24  # scenarios beyond this look the same; bounds the work per decision
    # the on-demand price a commitment is weighed against; the control loop injects its catalog (the default
    # is the built-in list, for callers that have not been wired yet)
    prices: PriceCatalog = BUILTIN_PRICE_CATALOG
    name: str = "breakeven"

    def propose(self, ctx: ProcurementContext) -> list[ReservationProposal]:
        hist = np.asarray(ctx.demand_history_gpus, dtype=np.float64)
        hist = np.where(np.isfinite(hist), hist, 0.0)
        if len(hist) < self.min_history_h:
            return []
        pool = ctx.pool
        on_demand = on_demand_usd_per_gpu_h(self.prices, ctx.sku_id, float(pool.price_usd_per_gpu_h))
        term_h = min(ctx.commitment_term_h, self.max_term_h)
        lead_h = pool.lead_time_s // HOUR_S
        cfg = ReplayConfig(
            term_h=term_h,
            lead_h=lead_h,
            reserved_usd_per_gpu_h=float(pool.price_usd_per_gpu_h),
            on_demand_usd_per_gpu_h=on_demand,
            spot_usd_per_gpu_h=on_demand,
            secondary_usd_per_gpu_h=on_demand,
        )
        scen = lag_scenarios(hist, cfg)
        if ctx.forecast is not None:
            scen = np.vstack([scen, *[_tile(q, term_h) for q in ctx.forecast.values]])
        have = float(ctx.committed_gpus_at_lead)
        excess = scen - have
        ok = np.isfinite(excess)
        worth = units_worth_committing(excess[ok], cfg.alpha)
        first = excess[:, 0][np.isfinite(excess[:, 0])]
        needed = units_worth_committing(first, 0.5)  # the first covered hour needs it in half the scenarios
        gpus = min(worth, needed)
        return whole_node_proposal(
            ctx,
            gpus,
            f"breakeven: {math.floor(gpus / ctx.gpus_per_node) * ctx.gpus_per_node} GPUs above {have:.0f} committed "
            f"are expected in use at least {cfg.alpha:.0%} of the term (reserved/on-demand price)",
        )


def lag_scenarios(history: FloatArray, cfg: ReplayConfig, days: int = 5, trend_weight: float = 0.5) -> FloatArray:
    """The break-even rule's scenarios ``(n, term_h)`` for the hours a commitment made now would cover: each hour
    ahead at the same hour of day on the ``days`` freshest days already observed for it (NaN where none is), scaled
    by (last day's mean / the lag window's mean) ** ``trend_weight``; one flat row at the last day's mean when no
    lag is observed."""
    t = len(history)
    offsets = cfg.lead_h + np.arange(cfg.term_h)
    first_lag = (offsets // 24) + 1
    rows: list[FloatArray] = []
    for m in range(days):
        src = t + offsets - 24 * (first_lag + m)
        ok = src >= 0
        if not np.any(ok):
            break
        rows.append(np.where(ok, history[np.clip(src, 0, t - 1)], np.nan))
    if trend_weight > 0 and t >= 48:
        span = min(t, 24 * days)
        ratio = float(np.mean(history[-24:])) / max(float(np.mean(history[-span:])), 1e-9)
        rows = [r * ratio**trend_weight for r in rows]
    if not rows:
        rows.append(np.full(cfg.term_h, float(np.mean(history[-24:]))))
    return np.vstack(rows)


def _tile(values: FloatArray, n: int) -> FloatArray:
    v = np.asarray(values, dtype=np.float64)
    if len(v) == 0:
        return np.full(n, np.nan)
    return np.resize(v, n)


#: ``gpufleet`` settings, the default first: the procurer the control loop runs as ``ControlLoop.gpufleet`` assembles it
#: (``default``), then variants of it (fields of :class:`~gpufleet.control.procurement.ForecastLedProcurer` and of its
#: :class:`~gpufleet.control.procurement.Hedge` replaced). ``bench generalize`` picks one leave-one-trace-out.
GPUFLEET_VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "weekly_only": {"fresh": None},  # the weekly-profile rule alone: session 8's procurer, deciding from 1 h
    # session 9's hysteresis between the two forecast rules (the leader's 1 %; the default is 2 %)
    "forecast_margin_0.01": {"hedge": {"forecast_margin": 0.01}},
    # session 10's hedge: capped at the leader's capacity, never above the forecast rule's target (the default holds
    # the cheaper rules' consensus since session 19)
    "leader_cap": {"hedge": {"consensus": False}},
}
GPUFLEET_SETTINGS = tuple(GPUFLEET_VARIANTS)


def gpufleet_procurer(setting: str = GPUFLEET_SETTINGS[0]) -> Procurer:
    """The loop's procurer (``ControlLoop.gpufleet(...).procurer``), or a named variant of it."""
    import dataclasses

    from gpufleet.control.loop import ControlLoop
    from gpufleet.control.procurement import ForecastLedProcurer

    if setting not in GPUFLEET_VARIANTS:
        raise ValidationError("gpufleet", f"choose from {', '.join(GPUFLEET_SETTINGS)}; got {setting!r}")
    base = ControlLoop.gpufleet(seed=0).procurer
    change = dict(GPUFLEET_VARIANTS[setting])
    if not change:
        return base
    assert isinstance(base, ForecastLedProcurer)
    hedge = change.pop("hedge", None)
    if hedge is not None and base.hedge is not None:
        change["hedge"] = dataclasses.replace(base.hedge, **hedge)
    elif "hedge" in GPUFLEET_VARIANTS[setting]:
        change["hedge"] = None
    return dataclasses.replace(base, **change)


def gpufleet_policy(setting: str = GPUFLEET_SETTINGS[0]) -> ProcurerPolicy:
    """The loop's procurer (or a variant) as the replay's ``gpufleet`` policy, asked every hour."""
    return ProcurerPolicy(gpufleet_procurer(setting), "gpufleet")


def run_series(
    cfg: ReplayConfig, demand: FloatArray, gpufleet: str = GPUFLEET_SETTINGS[0]
) -> dict[str, dict[str, float | None]]:
    """Every policy and the hindsight bound on one series; ratios are to the hindsight cost. The ``gpufleet`` row
    is the control loop's procurer through the ``Procurer`` port."""
    t0 = time.perf_counter()
    opt = hindsight_optimal(cfg, demand).result
    opt_wall = time.perf_counter() - t0
    policies: list[ReservationPolicy] = [gpufleet_policy(gpufleet), *baseline_policies()]  # type: ignore[list-item]
    out: dict[str, dict[str, float | None]] = {}
    for p in policies:
        t0 = time.perf_counter()
        res = replay(cfg, demand, p)
        out[p.name] = _row(res, opt.cost_usd, time.perf_counter() - t0)
    out["hindsight_optimal"] = _row(opt, opt.cost_usd, opt_wall)
    return out


def run(cfg: ReplayConfig, demand: dict[str, FloatArray]) -> dict[str, object]:
    """The JSON document of the benchmark: ``{"series": {ID: {POLICY: {...}}}, "config": {...}}``."""
    series = {sid: run_series(cfg, d) for sid, d in demand.items()}
    return {
        "series": series,
        "hours": {sid: len(d) for sid, d in demand.items()},
        "config": {
            "term_h": cfg.term_h,
            "lead_h": cfg.lead_h,
            "reserved_usd_per_gpu_h": cfg.reserved_usd_per_gpu_h,
            "on_demand_usd_per_gpu_h": cfg.on_demand_usd_per_gpu_h,
            "spot_usd_per_gpu_h": cfg.spot_usd_per_gpu_h,
            "secondary_usd_per_gpu_h": cfg.secondary_usd_per_gpu_h,
            "alpha": round(cfg.alpha, 4),
            "on_demand_quota_gpus": None if math.isinf(cfg.on_demand_quota_gpus) else cfg.on_demand_quota_gpus,
            "checkpointable_share": cfg.checkpointable_share,
            "spot_capacity_gpus": cfg.spot_capacity_gpus,
            "secondary_capacity_gpus": cfg.secondary_capacity_gpus,
            "unmet_penalty_usd_per_gpu_h": cfg.unmet_penalty_usd_per_gpu_h,
        },
    }


#: the procurers of the closed-loop comparison: the loop's own (``gpufleet``: control/procurement.py), the portfolio
#: LP and the break-even rule
CLOSED_LOOP_PROCURERS: dict[str, Callable[[], Procurer] | None] = {
    "gpufleet": None,
    "portfolio_lp": PortfolioProcurer,
    "breakeven": BreakevenProcurer,
}


def closed_loop(
    seeds: list[int], days: int, gpus: int, names: tuple[str, ...] = tuple(CLOSED_LOOP_PROCURERS)
) -> dict[str, Any]:
    """The simulator's default scenario with the gpufleet loop holding each procurer (and the baseline loop), per
    seed: total cost, GPUs bought, SLO attainment, and each procurer's cost over the baseline loop's."""
    import statistics

    from gpufleet.sim.builtin import default_scenario
    from gpufleet.sim.run import baseline_loop, gpufleet_loop, simulate

    rows = []
    for seed in seeds:
        sc = default_scenario(gpus=gpus, days=days, seed=seed)
        row: dict[str, Any] = {"seed": seed}
        _, base = simulate(sc, seed=seed, loop=baseline_loop(sc, seed))
        row["baseline"] = _loop_figures(base)
        for name in names:
            loop = gpufleet_loop(sc, seed)
            make = CLOSED_LOOP_PROCURERS[name]
            if make is not None:
                loop.procurer = make()
            _, res = simulate(sc, seed=seed, loop=loop)
            row[name] = {
                **_loop_figures(res),
                "ratio_to_baseline_loop": round(res["total_cost_usd"] / base["total_cost_usd"], 4),
            }
        rows.append(row)
    summary = {}
    for name in names:
        xs = [float(r[name]["ratio_to_baseline_loop"]) for r in rows]
        summary[name] = {
            "mean": round(statistics.fmean(xs), 4),
            "sd": round(statistics.stdev(xs), 4) if len(xs) > 1 else 0.0,
        }
    first = names[0]
    wins = sum(1 for r in rows if all(r[first]["total_cost_usd"] <= r[n]["total_cost_usd"] + 1e-6 for n in names))
    return {
        "days": days,
        "gpus": gpus,
        "seeds": seeds,
        "rows": rows,
        "ratio_to_baseline_loop": summary,
        f"{first}_cheapest_or_equal": wins,
    }


def _loop_figures(r: dict[str, Any]) -> dict[str, Any]:
    return {
        "total_cost_usd": round(float(r["total_cost_usd"]), 2),
        "gpus_bought": r["reservations"]["gpus_bought"],
        "serving_slo_attainment": r["serving_slo_attainment"],
        "p95_queue_wait_s": r["p95_queue_wait_s"],
    }
