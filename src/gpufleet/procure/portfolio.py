"""Portfolio optimizer: what to commit, where and when, as one LP/MILP solved by HiGHS.

Two stages on a regular grid of ``period_h`` hours (daily by default) over ``n_periods``:

* First stage (decided now, the same in every scenario), per SKU-region pair and commitment tier
  (reserved 1y/3y, secondary contracts, owned builds): GPUs starting each period ``x[s]`` (zero before the
  tier's lead time), held for ``term_periods`` (owned: to the horizon), paid per active GPU-period in the
  horizon. Capacity ``C[t] = C[t-1] + x[t] - x[t - term]`` (a sparse recurrence, not a dense sum).
* Recourse per scenario and period: on-demand (bounded by quota), spot (only checkpointable training,
  bounded by spot capacity and that demand), unmet (priced penalty, never free).

Constraints: non-preemptible demand (serving + non-checkpointable training) is met by committed +
existing + on-demand only, so serving never rides spot; a serving service level (the ``service_quantile``
of serving demand across scenarios covered by committed + existing capacity + the reliable share of the
on-demand quota; shortfall is penalized and reported); a cap on any provider's share of purchased
GPU-hours; a budget on committed spend. Objective: committed cost + expected recourse cost.
With one scenario equal to realized demand, the same model is the hindsight bound.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp
from scipy.optimize import Bounds, LinearConstraint, OptimizeResult, linprog, milp

from gpufleet.domain.errors import ValidationError
from gpufleet.procure.portfolio_solve import (
    Block,
    BlockLP,
    NotDecomposable,
    check_blocks,
    solve_blocks,
    solve_share_capped,
)

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class CommitTier:
    """A first-stage tier of one pair: reserved 1y/3y, a secondary contract or an owned build.

    ``price_usd_per_gpu_h``: effective hourly price while active (owned: capex / amortization + opex).
    ``term_periods``: None = active to the end of the horizon (owned capacity).
    """

    name: str
    provider_id: str
    price_usd_per_gpu_h: float
    term_periods: int | None
    lead_periods: int = 0
    max_gpus: float = math.inf  # capacity ceiling of the tier (secondary providers, build capacity)


def owned_tier(
    *, capex_usd_per_gpu: float, amortization_h: float, opex_usd_per_gpu_h: float, build_lead_periods: int
) -> CommitTier:
    """Owned capacity priced as straight-line amortization plus opex, from its build lead time on."""
    return CommitTier(
        "owned", "owned", capex_usd_per_gpu / amortization_h + opex_usd_per_gpu_h, None, build_lead_periods
    )


@dataclass(frozen=True, slots=True)
class PairDemand:
    """Demand scenarios ``(n_scenarios, n_periods)`` in GPUs for one SKU-region pair, by workload class."""

    sku_id: str
    region_id: str
    serving: FloatArray
    training: FloatArray  # non-checkpointable training: needs non-preemptible capacity
    checkpointable: FloatArray  # may ride spot
    commit_tiers: tuple[CommitTier, ...]
    on_demand_usd_per_gpu_h: float
    on_demand_quota_gpus: float = math.inf
    on_demand_provider: str = "aws"
    spot_usd_per_gpu_h: float = 0.0
    spot_capacity_gpus: float = 0.0
    spot_provider: str = "nebius"
    existing_gpus: FloatArray | None = None  # committed capacity already held, per period (expiry = drop)

    @property
    def key(self) -> str:
        return f"{self.sku_id}@{self.region_id}"


@dataclass(frozen=True, slots=True)
class PortfolioProblem:
    pairs: tuple[PairDemand, ...]
    period_h: float = 24.0
    scenario_weights: FloatArray | None = None  # default: equal
    service_quantile: float = 0.99
    on_demand_reliable_share: float = 0.9  # share of the on-demand quota trusted for the service level
    max_provider_share: float = 1.0
    provider_cap_scope: str = "fleet"  # "fleet": one cap over all pairs; "pair": the cap in each SKU-region pair
    commit_budget_usd: float = math.inf
    unmet_penalty_factor: float = 3.0  # unmet GPU-h priced at this many times on-demand


@dataclass(frozen=True, slots=True)
class CommitDecision:
    """One commitment the plan makes, with why (reason code and the numbers behind it)."""

    pair: str
    tier: str
    provider_id: str
    start_period: int
    gpus: float
    term_periods: int | None
    est_cost_usd: float
    breakeven_utilization: float  # tier price / on-demand price
    expected_utilization: float  # expected used share of the tier's capacity over the commitment
    demand_quantile_covered: float  # share of scenario-periods whose demand is at most the capacity top
    reason: str


@dataclass(frozen=True, slots=True)
class PortfolioPlan:
    status: str
    objective_usd: float
    committed_cost_usd: float
    expected_recourse_usd: float
    capacity: dict[str, dict[str, FloatArray]]  # pair -> tier -> GPUs per period
    commits: dict[str, dict[str, FloatArray]]  # pair -> tier -> GPUs starting per period
    decisions: list[CommitDecision]
    expected_unmet_gpu_h: float
    service_shortfall_gpu_h: float
    provider_share: dict[str, float]
    solve_s: float
    n_vars: int
    n_rows: int
    provider_share_by_pair: dict[str, dict[str, float]] = field(default_factory=dict)
    extra: dict[str, float] = field(default_factory=dict)


class _Builder:
    """Collects variables (cost, bounds, integrality) and sparse rows."""

    def __init__(self) -> None:
        self.c: list[FloatArray] = []
        self.lb: list[FloatArray] = []
        self.ub: list[FloatArray] = []
        self.integ: list[FloatArray] = []
        self.n = 0
        self.rows: list[npt.NDArray[np.int64]] = []
        self.cols: list[npt.NDArray[np.int64]] = []
        self.vals: list[FloatArray] = []
        self.rlo: list[FloatArray] = []
        self.rhi: list[FloatArray] = []
        self.m = 0

    def var(self, cost: FloatArray, ub: FloatArray, integral: bool = False) -> npt.NDArray[np.int64]:
        k = len(cost)
        self.c.append(np.asarray(cost, dtype=np.float64))
        self.lb.append(np.zeros(k))
        self.ub.append(np.asarray(ub, dtype=np.float64))
        self.integ.append(np.full(k, 1.0 if integral else 0.0))
        idx = np.arange(self.n, self.n + k, dtype=np.int64)
        self.n += k
        return idx

    def new_rows(self, k: int, lo: float | FloatArray, hi: float | FloatArray) -> npt.NDArray[np.int64]:
        self.rlo.append(np.broadcast_to(np.asarray(lo, dtype=np.float64), (k,)).copy())
        self.rhi.append(np.broadcast_to(np.asarray(hi, dtype=np.float64), (k,)).copy())
        idx = np.arange(self.m, self.m + k, dtype=np.int64)
        self.m += k
        return idx

    def add(self, rows: npt.NDArray[np.int64], cols: npt.NDArray[np.int64], val: float | FloatArray) -> None:
        self.rows.append(rows)
        self.cols.append(cols)
        self.vals.append(np.broadcast_to(np.asarray(val, dtype=np.float64), rows.shape).astype(np.float64))


def _check(problem: PortfolioProblem) -> tuple[int, int]:
    if not problem.pairs:
        raise ValidationError("pairs", "at least one SKU-region pair is needed")
    s, t = problem.pairs[0].serving.shape
    for i, p in enumerate(problem.pairs):
        for name in ("serving", "training", "checkpointable"):
            a = getattr(p, name)
            if a.shape != (s, t):
                raise ValidationError(f"pairs[{i}].{name}", f"shape {a.shape} != {(s, t)}")
            if not np.all(np.isfinite(a)) or np.any(a < 0):
                raise ValidationError(f"pairs[{i}].{name}", "must be finite and >= 0")
    if problem.provider_cap_scope not in ("fleet", "pair"):
        raise ValidationError("provider_cap_scope", "must be 'fleet' or 'pair'")
    if not 0 < problem.max_provider_share <= 1:
        raise ValidationError("max_provider_share", "must be in (0, 1]")
    return s, t


def optimize_portfolio(
    problem: PortfolioProblem,
    *,
    integral: bool = False,
    time_limit_s: float = 120.0,
    decompose: bool = True,
    stopwatch: Callable[[], float] | None = None,
) -> PortfolioPlan:
    """Solve the portfolio problem (LP, or MILP with whole GPUs when ``integral``).

    ``stopwatch`` (e.g. ``time.perf_counter``, injected by benchmarks) times the solver call into
    ``plan.solve_s``; without one ``solve_s`` is 0.0 (decision code reads no clock).

    The LP is solved pair by pair when nothing but a fleet-wide provider cap (share >= 0.5) couples the
    pairs (``decompose``; same optimum as the joint LP, see :mod:`gpufleet.procure.portfolio_solve`);
    a budget, a MILP or a cap below one half use the joint model.
    """
    n_s, n_t = _check(problem)
    w = np.full(n_s, 1.0 / n_s) if problem.scenario_weights is None else np.asarray(problem.scenario_weights)
    w = w / w.sum()
    ph = problem.period_h
    b = _Builder()
    t_idx = np.arange(n_t, dtype=np.int64)
    cap_vars: list[dict[str, npt.NDArray[np.int64]]] = []
    commit_vars: list[dict[str, npt.NDArray[np.int64]]] = []
    rec_vars: list[dict[str, npt.NDArray[np.int64]]] = []
    provider_terms: dict[str, list[tuple[npt.NDArray[np.int64], FloatArray]]] = {}
    pair_provider_terms: list[dict[str, list[tuple[npt.NDArray[np.int64], FloatArray]]]] = []
    committed_cost_terms: list[tuple[npt.NDArray[np.int64], FloatArray]] = []
    sl_slack: list[npt.NDArray[np.int64]] = []
    blocks: list[Block] = []  # per pair: its variables and rows (the LP is block diagonal without coupling rows)
    capped = problem.max_provider_share < 1.0
    for p in problem.pairs:
        v0, r0 = b.n, b.m
        existing = np.zeros(n_t) if p.existing_gpus is None else np.asarray(p.existing_gpus, dtype=np.float64)
        d_np = p.serving + p.training
        d_all = d_np + p.checkpointable
        peak = float(d_all.max(initial=0.0)) + 1.0
        caps: dict[str, npt.NDArray[np.int64]] = {}
        coms: dict[str, npt.NDArray[np.int64]] = {}
        mine: dict[str, list[tuple[npt.NDArray[np.int64], FloatArray]]] = {}
        pair_provider_terms.append(mine)
        for tier in p.commit_tiers:
            ub_x = np.where(t_idx >= tier.lead_periods, min(peak, tier.max_gpus), 0.0)
            x = b.var(np.zeros(n_t), ub_x, integral)
            cost = np.full(n_t, tier.price_usd_per_gpu_h * ph)
            c = b.var(cost, np.full(n_t, min(tier.max_gpus, peak * 2)))
            # C[t] - C[t-1] - x[t] + x[t-term] = 0
            r = b.new_rows(n_t, 0.0, 0.0)
            b.add(r, c, 1.0)
            b.add(r[1:], c[:-1], -1.0)
            b.add(r, x, -1.0)
            if tier.term_periods is not None and tier.term_periods < n_t:
                b.add(r[tier.term_periods :], x[: n_t - tier.term_periods], 1.0)
            caps[tier.name], coms[tier.name] = c, x
            provider_terms.setdefault(tier.provider_id, []).append((c, np.ones(n_t)))
            mine.setdefault(tier.provider_id, []).append((c, np.ones(n_t)))
            committed_cost_terms.append((c, cost))
        cap_vars.append(caps)
        commit_vars.append(coms)
        rec: dict[str, npt.NDArray[np.int64]] = {}
        ws = np.repeat(w, n_t)  # scenario-major flattening: index = s * n_t + t
        od = b.var(ws * p.on_demand_usd_per_gpu_h * ph, np.full(n_s * n_t, p.on_demand_quota_gpus))
        spot_ub = np.minimum(p.checkpointable.ravel(), p.spot_capacity_gpus)
        spot = b.var(ws * p.spot_usd_per_gpu_h * ph, spot_ub)
        pen = ws * p.on_demand_usd_per_gpu_h * problem.unmet_penalty_factor * ph
        un_np = b.var(pen, np.full(n_s * n_t, np.inf))
        un_ck = b.var(pen, np.full(n_s * n_t, np.inf))
        rec.update(on_demand=od, spot=spot, unmet_np=un_np, unmet_ck=un_ck)
        rec_vars.append(rec)
        for pid, v in ((p.on_demand_provider, od), (p.spot_provider, spot)):
            provider_terms.setdefault(pid, []).append((v, ws))
            mine.setdefault(pid, []).append((v, ws))
        tt = np.tile(t_idx, n_s)
        ex = existing[tt]
        ra = b.new_rows(n_s * n_t, d_np.ravel() - ex, np.inf)  # non-preemptible coverage
        rb = b.new_rows(n_s * n_t, d_all.ravel() - ex, np.inf)  # total coverage
        for c in caps.values():
            b.add(ra, c[tt], 1.0)
            b.add(rb, c[tt], 1.0)
        for rows, vs in ((ra, (od, un_np)), (rb, (od, spot, un_np, un_ck))):
            for v in vs:
                b.add(rows, v, 1.0)
        # serving service level: committed + existing + reliable on-demand >= serving quantile
        q = np.quantile(p.serving, problem.service_quantile, axis=0)
        reliable = 0.0 if math.isinf(p.on_demand_quota_gpus) else p.on_demand_quota_gpus
        reliable *= problem.on_demand_reliable_share
        if math.isinf(p.on_demand_quota_gpus):
            q = np.zeros(n_t)  # an unbounded on-demand pool covers any quantile
        slack = b.var(np.full(n_t, 10.0 * p.on_demand_usd_per_gpu_h * problem.unmet_penalty_factor * ph), q + 1.0)
        sl_slack.append(slack)
        rs = b.new_rows(n_t, q - existing - reliable, np.inf)
        for c in caps.values():
            b.add(rs, c, 1.0)
        b.add(rs, slack, 1.0)
        if capped and problem.provider_cap_scope == "pair":  # provider share cap inside the pair's block
            _provider_cap(b, mine, problem.max_provider_share)
        blocks.append((v0, b.n, r0, b.m))
    # fleet-wide provider share cap over purchased GPU-periods (expected): joint rows, or a Lagrangian
    # relaxation over the per-pair blocks (procure/portfolio_solve.py)
    fleet_cap = capped and problem.provider_cap_scope == "fleet"
    decompose = decompose and not integral and math.isinf(problem.commit_budget_usd)
    decompose = decompose and not (fleet_cap and problem.max_provider_share < 0.5)
    if fleet_cap and not decompose:
        _provider_cap(b, provider_terms, problem.max_provider_share)
    if math.isfinite(problem.commit_budget_usd):
        r = b.new_rows(1, -np.inf, problem.commit_budget_usd)
        for v, coef in committed_cost_terms:
            b.add(np.full(len(v), r[0]), v, coef)
    c_vec = np.concatenate(b.c)
    a = sp.csr_array((np.concatenate(b.vals), (np.concatenate(b.rows), np.concatenate(b.cols))), shape=(b.m, b.n))
    t0 = stopwatch() if stopwatch is not None else 0.0
    res: OptimizeResult | None = None
    if decompose:
        res = _solve_decomposed(c_vec, a, b, blocks, provider_terms, problem, fleet_cap, time_limit_s)
    if res is None and not integral:
        res = _solve_lp(c_vec, a, b, time_limit_s)
    elif res is None:
        res = milp(
            c_vec,
            constraints=LinearConstraint(a, np.concatenate(b.rlo), np.concatenate(b.rhi)),
            bounds=Bounds(np.concatenate(b.lb), np.concatenate(b.ub)),
            integrality=np.concatenate(b.integ),
            options={"time_limit": time_limit_s, "mip_rel_gap": 1e-4},
        )
    solve_s = stopwatch() - t0 if stopwatch is not None else 0.0
    if res.x is None:
        raise ValidationError("problem", f"portfolio solve failed: {res.message}")
    x = res.x
    plan = _plan(
        problem,
        x,
        float(res.fun),
        res.message,
        solve_s,
        b,
        cap_vars,
        commit_vars,
        rec_vars,
        w,
        sl_slack,
        provider_terms,
        committed_cost_terms,
        pair_provider_terms,
    )
    extra = {"decomposed": 1.0 if "block" in str(res.message) else 0.0}
    if "lagrange_iterations" in res:
        extra["lagrange_iterations"] = float(res.lagrange_iterations)
        extra["duality_gap_usd"] = float(res.duality_gap_usd)
    return replace(plan, extra=extra)


def _provider_cap(
    b: _Builder, provider_terms: dict[str, list[tuple[npt.NDArray[np.int64], FloatArray]]], share: float
) -> None:
    """Rows ``total_P <= share * sum_Q total_Q`` with one total per provider (each defined by a short row)."""
    if len(provider_terms) < 2:
        return
    totals = b.var(np.zeros(len(provider_terms)), np.full(len(provider_terms), np.inf))
    for j, terms in enumerate(provider_terms.values()):
        # one partial sum per (pair, tier) term keeps every row short (dense rows slow the simplex's LU)
        partial = b.var(np.zeros(len(terms)), np.full(len(terms), np.inf))
        for i, (v, coef) in enumerate(terms):
            r = b.new_rows(1, 0.0, 0.0)
            b.add(r, partial[i : i + 1], -1.0)
            b.add(np.full(len(v), r[0]), v, coef)
        r = b.new_rows(1, 0.0, 0.0)
        b.add(r, totals[j : j + 1], -1.0)
        b.add(np.full(len(partial), r[0]), partial, 1.0)
    for j in range(len(provider_terms)):
        r = b.new_rows(1, -np.inf, 0.0)
        b.add(np.full(len(totals), r[0]), totals, -share)
        b.add(r, totals[j : j + 1], 1.0)


def _solve_decomposed(
    c: FloatArray,
    a: sp.csr_array,
    b: _Builder,
    blocks: list[Block],
    provider_terms: dict[str, list[tuple[npt.NDArray[np.int64], FloatArray]]],
    problem: PortfolioProblem,
    fleet_cap: bool,
    time_limit_s: float,
) -> OptimizeResult | None:
    """Per-pair block solves (plus the Lagrangian fleet cap); None when the joint LP must answer."""
    try:
        check_blocks(blocks, b.n, b.m)
        lp = BlockLP(
            a,
            np.concatenate(b.lb),
            np.concatenate(b.ub),
            np.concatenate(b.rlo),
            np.concatenate(b.rhi),
            blocks,
            time_limit_s,
        )
        if fleet_cap:
            coef = {}
            for pid, terms in provider_terms.items():
                vec = np.zeros(b.n)
                for v, cf in terms:
                    vec[v] += cf
                coef[pid] = vec
            sol = solve_share_capped(lp, c, coef, problem.max_provider_share)
        else:
            sol = solve_blocks(lp, c)
    except NotDecomposable:
        return None
    return OptimizeResult(
        x=sol.x,
        fun=sol.objective,
        message=sol.status,
        lagrange_iterations=sol.lagrange_iterations,
        duality_gap_usd=sol.duality_gap_usd,
    )


def _solve_lp(c: FloatArray, a: sp.csr_array, b: _Builder, time_limit_s: float) -> OptimizeResult:
    """LP through HiGHS (its own choice of simplex or interior point), rows split into <= and ==."""
    lo, hi = np.concatenate(b.rlo), np.concatenate(b.rhi)
    eq = lo == hi
    up = ~eq & np.isfinite(hi)
    dn = ~eq & np.isfinite(lo)
    a_ub = sp.vstack([a[np.nonzero(up)[0]], -a[np.nonzero(dn)[0]]]).tocsr()
    b_ub = np.concatenate([hi[up], -lo[dn]])
    bounds = np.column_stack([np.concatenate(b.lb), np.concatenate(b.ub)])
    return linprog(
        c,
        A_ub=a_ub,
        b_ub=b_ub,
        A_eq=a[np.nonzero(eq)[0]],
        b_eq=lo[eq],
        bounds=bounds,
        method="highs",
        options={"time_limit": time_limit_s},
    )


def _plan(
    problem: PortfolioProblem,
    x: FloatArray,
    objective: float,
    status: str,
    solve_s: float,
    b: _Builder,
    cap_vars: list[dict[str, npt.NDArray[np.int64]]],
    commit_vars: list[dict[str, npt.NDArray[np.int64]]],
    rec_vars: list[dict[str, npt.NDArray[np.int64]]],
    w: FloatArray,
    sl_slack: list[npt.NDArray[np.int64]],
    provider_terms: dict[str, list[tuple[npt.NDArray[np.int64], FloatArray]]],
    committed_cost_terms: list[tuple[npt.NDArray[np.int64], FloatArray]],
    pair_provider_terms: list[dict[str, list[tuple[npt.NDArray[np.int64], FloatArray]]]],
) -> PortfolioPlan:
    from gpufleet.procure.explain import explain_commits

    ph = problem.period_h
    committed = float(sum(float(x[v] @ c) for v, c in committed_cost_terms))
    capacity = {p.key: {k: x[v].copy() for k, v in cv.items()} for p, cv in zip(problem.pairs, cap_vars, strict=True)}
    commits = {p.key: {k: x[v].copy() for k, v in cv.items()} for p, cv in zip(problem.pairs, commit_vars, strict=True)}
    n_t = problem.pairs[0].serving.shape[1]
    ws = np.repeat(w, n_t)
    unmet = sum(float(ws @ (x[r["unmet_np"]] + x[r["unmet_ck"]])) for r in rec_vars) * ph
    shortfall = sum(float(x[s].sum()) for s in sl_slack) * ph
    totals = {pid: sum(float(x[v] @ c) for v, c in terms) for pid, terms in provider_terms.items()}
    grand = sum(totals.values())
    share = {pid: (v / grand if grand > 0 else 0.0) for pid, v in totals.items()}
    by_pair: dict[str, dict[str, float]] = {}
    for p, terms_of_pair in zip(problem.pairs, pair_provider_terms, strict=True):
        t_pair = {pid: sum(float(x[v] @ c) for v, c in terms) for pid, terms in terms_of_pair.items()}
        g_pair = sum(t_pair.values())
        by_pair[p.key] = {pid: (v / g_pair if g_pair > 0 else 0.0) for pid, v in t_pair.items()}
    decisions = explain_commits(problem, capacity, commits)
    return PortfolioPlan(
        status=str(status),
        objective_usd=objective,
        committed_cost_usd=committed,
        expected_recourse_usd=objective - committed,
        capacity=capacity,
        commits=commits,
        decisions=decisions,
        expected_unmet_gpu_h=unmet,
        service_shortfall_gpu_h=shortfall,
        provider_share=share,
        provider_share_by_pair=by_pair,
        solve_s=solve_s,
        n_vars=b.n,
        n_rows=b.m,
    )


def hindsight_plan(
    problem: PortfolioProblem, realized: list[tuple[FloatArray, FloatArray, FloatArray]]
) -> PortfolioPlan:
    """The same model with one scenario, the realized demand (serving, training, checkpointable) per pair."""
    pairs = tuple(
        replace(p, serving=s[None, :], training=tr[None, :], checkpointable=ck[None, :])
        for p, (s, tr, ck) in zip(problem.pairs, realized, strict=True)
    )
    return optimize_portfolio(
        PortfolioProblem(
            pairs=pairs,
            period_h=problem.period_h,
            service_quantile=problem.service_quantile,
            on_demand_reliable_share=problem.on_demand_reliable_share,
            max_provider_share=problem.max_provider_share,
            provider_cap_scope=problem.provider_cap_scope,
            commit_budget_usd=problem.commit_budget_usd,
            unmet_penalty_factor=problem.unmet_penalty_factor,
        )
    )
