"""The admission pipeline: quota -> place -> budget, ending in place / degrade / preempt / queue, with reason codes.

One request for GPUs (a workload's replicas or gang members on one SKU) goes through the stages in order:

1. **quota** (optional): the team's Kueue-style quota, :class:`gpufleet.control.scheduling.QuotaAdmission`
   (the object the simulator's scheduling stage holds: :meth:`AdmissionPipeline.check_quota` is its ``check``).
   A refusal queues the request (reason ``quota_<book's reason>``, e.g. ``quota_over_borrowing_limit``); a team
   without a quota passes.
2. **place**: the degrading fallback chain over the pools' headroom (:func:`gpufleet.place.degrade.recommend`,
   the code the simulator's placement stage runs): place in the first pool of the chain that fits, degrade to a
   declared option, preempt lower-priority running work, or queue; each skipped link carries its trigger. A
   ``low`` priority is opportunistic: on-demand and secondary pools are withheld (trigger ``low_priority``).
3. **budget** (optional): the team's spending limit (:func:`gpufleet.cost.budgets.admit`): the placement is
   priced at its pool; over budget the first declared degrade option that is placed and fits is taken
   (``over_budget_degraded``), else the request queues until the window resets (``over_budget_queued``; when a
   start at that reset cannot finish by the request's deadline, ``over_budget_deadline_missed``). Never a
   silent overrun. Which budget and what was spent are the world's (a store holds them under a lock); the world
   hands the pipeline a :data:`BudgetGate` that decides with :func:`decide_budget`.

Everything here is pure: observations in (pool headroom, prices, the budget's figures), a decision out as data.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

from gpufleet.control.scheduling import QuotaAdmission
from gpufleet.cost.budgets import (
    BUDGET_PERIODS,
    MAX_BUDGET_WINDOWS,
    AdmissionAction,
    AdmissionDecision,
    AdmissionRequest,
    Budget,
    BudgetUnit,
    CostOption,
    Spend,
    admit,
    budget_window,
    budget_windows,
    evaluate_budget,
    expected_units,
)
from gpufleet.domain.allocations import FallbackStep
from gpufleet.domain.money import LEDGER_UNITS_PER_USD
from gpufleet.domain.pools import TIER_ORDER, Tier
from gpufleet.domain.workloads import DegradeOption, Priority, ServingScaling, Workload, WorkloadKind
from gpufleet.place.degrade import DegradeRequest, PoolHeadroom, RunningWork, recommend
from gpufleet.schedule.quota import Admission

__all__ = [
    "BUDGET_PERIODS",
    "MAX_BUDGET_WINDOWS",
    "Admission",
    "AdmissionAction",
    "AdmissionOutcome",
    "AdmissionPipeline",
    "Budget",
    "BudgetCall",
    "BudgetGate",
    "ChainPlacementRequest",
    "PoolHeadroom",
    "PricedOption",
    "RunningWork",
    "budget_report",
    "budget_windows",
    "decide_budget",
    "expected_units",
    "place",
    "run_end_s",
    "team_budget",
    "usd",
]

_OPPORTUNISTIC_SKIP = (Tier.ON_DEMAND, Tier.SECONDARY)


def usd(units: int) -> Decimal:
    """Ledger units -> USD rounded to the cent."""
    return (Decimal(units) / LEDGER_UNITS_PER_USD).quantize(Decimal("0.01"))


# ---- requests and the budget's data ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ChainPlacementRequest:
    """``gpus`` per replica (or per gang member) times ``replicas``; degrade options lower either or the SKU."""

    job_class: WorkloadKind
    priority: Priority
    sku_id: str
    gpus: int
    regions: Sequence[str] = ()
    checkpointable: bool = False
    replicas: int = 1
    deadline_s: int | None = None
    expected_run_s: int = 0
    degrade_options: tuple[DegradeOption, ...] = ()
    running: tuple[RunningWork, ...] = ()
    workload_id: str = "-"
    team: str | None = None  # whose budget pays (app_team tokens: their own team by default)
    admit: bool = False  # book the placement against the budget (an admission), not just recommend
    # GPU memory a replica (gang member) needs across its GPUs, GB: pools whose SKU cannot hold it are skipped
    replica_gpu_memory_gb: int | None = None


@dataclass(frozen=True, slots=True)
class PricedOption:
    """A placement the request could run as: name, price (micro-dollars per GPU-hour), total GPUs; ``victims``: the
    running work (in its pool) it preempts to get them."""

    name: str
    price_uusd_per_gpu_h: int
    gpus: int
    pool_id: str | None
    victims: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class AdmissionOutcome:
    """The budget stage's answer: the action, the option taken, and the ``budget`` object of the response."""

    action: AdmissionAction
    option: str | None
    body: dict[str, Any]


# (preferred, degrade options placed, context) -> the budget stage's outcome; None = the team has no budget
BudgetGate = Callable[[PricedOption, Sequence[PricedOption], dict[str, Any]], AdmissionOutcome | None]


def team_budget(
    team_id: str, *, limit_cents: int, period: str, alert_at: Sequence[float], enforce: bool, now_s: int
) -> Budget:
    """A team's USD budget over its current calendar window (``period``: day, week or month, UTC)."""
    window = budget_window(period, now_s)
    return Budget(
        id=f"team:{team_id}",
        dim="team",
        key=team_id,
        unit=BudgetUnit.USD,
        limit=Decimal(limit_cents) / 100,
        window_start_s=window[0],
        window_end_s=window[1],
        alert_at=tuple(alert_at),
        enforce=enforce,
    )


def budget_report(budget: Budget, metered_units: int, committed_units: int, now_s: int) -> dict[str, Any]:
    """Where the budget stands: spend (metered + committed), what remains, the fraction used, the straight-line
    projection to the window's end and the alerts they raise."""
    st = evaluate_budget(budget, Spend(units=metered_units + committed_units), now_s)
    return {
        "window_start_s": budget.window_start_s,
        "window_end_s": budget.window_end_s,
        "metered_usd": usd(metered_units),
        "committed_usd": usd(committed_units),
        "spent_usd": usd(metered_units + committed_units),
        "remaining_usd": usd(max(0, int(budget.limit_amount) - metered_units - committed_units)),
        "fraction_used": None if math.isinf(st.fraction) else round(st.fraction, 6),
        "projected_fraction": None if math.isinf(st.projected_fraction) else round(st.projected_fraction, 6),
        "alert_at": list(budget.alert_at),
        "alerts": [{"level": a.level, "reason": a.reason, "threshold": a.threshold} for a in st.alerts],
    }


@dataclass(frozen=True, slots=True)
class BudgetCall:
    """:func:`decide_budget`'s answer. ``chosen`` is the option admitted (None when queued); ``admitted_units``
    what it is expected to spend in the current window (0 when queued); ``end_s`` when it is expected to stop."""

    decision: AdmissionDecision
    chosen: PricedOption | None
    request_units: int
    admitted_units: int
    end_s: int

    @property
    def rate_uusd_per_h(self) -> int:
        return 0 if self.chosen is None else self.chosen.price_uusd_per_gpu_h * self.chosen.gpus


def run_end_s(budget: Budget, expected_run_s: int, now_s: int) -> int:
    """When a request admitted at ``now_s`` is expected to stop: ``expected_run_s`` later, or at the end of the
    budget's current window when it is 0 (unknown)."""
    return budget.window_end_s if expected_run_s <= 0 else now_s + expected_run_s


def decide_budget(
    budget: Budget,
    spent_units: int,
    preferred: PricedOption,
    degrade: Sequence[PricedOption],
    *,
    expected_run_s: int,
    workload_id: str,
    now_s: int,
    later: Mapping[tuple[int, int], int] | None = None,
) -> BudgetCall:
    """Admit, degrade or queue one request against ``budget`` with ``spent_units`` already spent (metered +
    committed) in its current window. Each option's expected spend is its price x GPUs x its expected run
    (``expected_run_s``; 0 = until the current window ends) inside each window.

    A run that goes on past the current window is checked in every later window it reaches too: ``later`` maps
    each such window (start, end) to what admitted work is committed to spend in it (the caller's
    :func:`budget_windows`; a window the run reaches but ``later`` does not name counts as nothing committed, so
    pass them all: the caller caps them at :data:`MAX_BUDGET_WINDOWS`, and a run past the last is not checked
    there). An option is admitted only if it fits in every window it touches; a queued request retries when the
    first window that refuses its preferred option ends."""
    window = (budget.window_start_s, budget.window_end_s)
    end_s = run_end_s(budget, expected_run_s, now_s)
    later = later or {}
    ahead = sorted(w for w in later if window[1] <= w[0] < end_s)
    budgets = [budget, *(replace(budget, id=f"{budget.id}@{w[0]}", window_start_s=w[0], window_end_s=w[1])
                         for w in ahead)]  # fmt: skip
    spent = {budget.id: Spend(units=spent_units)}
    spent.update({b.id: Spend(units=later[w]) for b, w in zip(budgets[1:], ahead, strict=True)})

    def units(o: PricedOption, w: tuple[int, int]) -> int:
        return expected_units(o.price_uusd_per_gpu_h * o.gpus, now_s, end_s, w)

    def option(o: PricedOption) -> CostOption:
        return CostOption(o.name, Spend(units=units(o, window)),
                          {b.id: Spend(units=units(o, w)) for b, w in zip(budgets[1:], ahead, strict=True)})  # fmt: skip

    req = AdmissionRequest(workload_id, {budget.dim: budget.key}, option(preferred), tuple(map(option, degrade)))
    decision = admit([req], budgets, spent, now_s)[0]
    if decision.budget_id is not None:
        decision = replace(decision, budget_id=budget.id)  # the team's budget, whichever of its windows refused
    chosen = next((o for o in (preferred, *degrade) if o.name == decision.option), None)
    return BudgetCall(decision, chosen, units(preferred, window), 0 if chosen is None else units(chosen, window), end_s)


# ---- place ---------------------------------------------------------------------------------------------------------
def _step(step: FallbackStep, region_of: dict[str, str]) -> dict[str, Any]:
    return {
        "pool": step.pool_id,
        "region": None if step.pool_id is None else region_of.get(step.pool_id),
        "tier": None if step.tier is None else step.tier.value,
        "trigger": step.trigger,
    }


def _skipped(step: FallbackStep, region_of: dict[str, str]) -> dict[str, Any]:
    """A pool passed over, naming the degrade option it was tried for (None: the request as asked)."""
    return {**_step(step, region_of), "option": None if step.option is None else f"degrade_options[{step.option}]"}


def place(
    req: ChainPlacementRequest,
    states: Sequence[PoolHeadroom],
    *,
    now_s: int,
    sku_memory_gb: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """The placement stage: withhold pools a ``low`` priority may not buy, then the shared degrade decision (with
    the simulator's settings: no ``pool_utilization`` trigger, a pool is passed over only when it cannot take the
    request; checkpointed training tries spot pools cheaper than on-demand right after reserved).

    The answer: ``{region, pool, tier, price_usd_per_gpu_h, reason, action, sku, gpus, fallback, skipped,
    degrade, victims, expected_start_s}``; ``fallback`` is the chain after the chosen pool, ending with the queue.
    An exhausted pool is never an error: it is a skipped link with its trigger; ``skipped`` names every pool tried
    and passed over, for the request (``option`` null) and for each degrade option tried (``option``
    ``degrade_options[i]``). With ``req.replica_gpu_memory_gb``
    a pool whose SKU's memory (``sku_memory_gb``: GB per GPU by SKU; a SKU it does not name counts as too small)
    x GPUs per replica is below it is skipped (trigger ``gpu_memory``), for the request and each degrade option."""
    region_of = {st.pool.id: st.pool.region_id for st in states}
    withheld: list[dict[str, Any]] = []
    eligible: list[PoolHeadroom] = []
    for st in states:
        if req.priority is Priority.LOW and st.pool.tier in _OPPORTUNISTIC_SKIP:
            withheld.append(_skipped(FallbackStep(st.pool.id, st.pool.tier, "low_priority"), region_of))
        else:
            eligible.append(st)
    training = req.job_class is WorkloadKind.TRAINING
    workload = Workload(
        id=req.workload_id,
        name=req.workload_id,
        kind=req.job_class,
        team_id="-",
        tenant_id="-",
        priority=req.priority,
        acceptable_skus=(req.sku_id,),
        gpus_per_replica=req.gpus,
        gang_size=req.replicas if training else 1,
        checkpoint_interval_s=3600 if training and req.checkpointable else None,
        scaling=None if training else ServingScaling(req.replicas, req.replicas, 1.0),
        deadline_s=req.deadline_s,
        degrade_options=req.degrade_options,
    )
    d = recommend(
        DegradeRequest(
            workload=workload,
            now_s=now_s,
            pools=tuple(eligible),
            expected_run_s=req.expected_run_s,
            running=req.running,
            # as the simulator's chain (place/chain.py): a pool that can take the request is never passed over for
            # being nearly full (that sent work from paid reserved room to on-demand, from on-demand to a dearer tier)
            utilization_high=math.inf,
            # checkpointed training on spot first where spot is cheaper, as the loop launches it (the simulator's
            # SpotFirstForCheckpointed): the service recommended on-demand at several times spot's price
            spot_first=True,
            replica_memory_gb=req.replica_gpu_memory_gb,
            sku_memory_gb=dict(sku_memory_gb or {}),
        )
    )
    price = next((st.pool.price_usd_per_gpu_h for st in states if st.pool.id == d.pool_id), None)
    opt = d.degrade
    return {
        "region": d.region_id,
        "pool": d.pool_id,
        "tier": d.tier,
        "price_usd_per_gpu_h": price,
        "reason": d.reason,
        "action": d.action,
        "sku": d.sku_id,
        "gpus": d.gpus,
        "fallback": [_step(s, region_of) for s in d.chain],
        "skipped": withheld + [_skipped(s, region_of) for s in d.skipped],
        "degrade": None
        if opt is None
        else {"gpus": opt.gpus_per_replica, "sku": opt.sku_id, "min_replicas": opt.min_replicas},
        "victims": list(d.victims),
        "expected_start_s": d.expected_start_s,
    }


def _queued(decision: dict[str, Any], reason: str, retry_at_s: int | None) -> dict[str, Any]:
    return {
        **decision,
        "region": None,
        "pool": None,
        "tier": None,
        "price_usd_per_gpu_h": None,
        "action": "queue",
        "reason": reason,
        "fallback": [{"pool": None, "region": None, "tier": None, "trigger": reason}],
        "degrade": None,
        "victims": [],
        "expected_start_s": retry_at_s,
    }


# ---- the pipeline --------------------------------------------------------------------------------------------------
@dataclass(slots=True)
class AdmissionPipeline:
    """quota -> place -> budget for one request (see the module docstring). ``quota``: the team quota book
    (None: no team quotas in this world)."""

    quota: QuotaAdmission | None = None

    def check_quota(self, team: str | None, sku_id: str, gpus: int) -> Admission | None:
        """The quota stage: the book's :class:`~gpufleet.schedule.quota.Admission` (admit, admit after reclaiming
        lent quota from borrowers, or reject, with its reason; ``no_quota`` for a team without an entry), exactly
        :meth:`QuotaAdmission.check`; None without a book or a team (nothing to check). Nothing is recorded: the
        world holds the quota (:meth:`QuotaAdmission.hold`) once the work runs."""
        if self.quota is None or team is None:
            return None
        return self.quota.check(team, sku_id, gpus)

    def decide(
        self,
        req: ChainPlacementRequest,
        states: Sequence[PoolHeadroom],
        *,
        now_s: int,
        team: str | None = None,
        price_uusd: Mapping[str, int] | None = None,
        budget: BudgetGate | None = None,
        sku_memory_gb: Mapping[str, int] | None = None,
    ) -> dict[str, Any]:
        """The decision for ``req`` over ``states`` (pool headroom); ``price_uusd``: each pool's price in
        micro-dollars per GPU-hour (what the budget stage charges). The answer is :func:`place`'s plus
        ``budget`` (the gate's ``budget`` object, None without one) and ``tiers_considered``."""
        quota = self.check_quota(team, req.sku_id, req.gpus * max(1, req.replicas))
        decision = place(req, states, now_s=now_s, sku_memory_gb=sku_memory_gb)
        if quota is not None and quota.decision == "reject":
            decision = _queued(decision, f"quota_{quota.reason}", None)
            decision["budget"] = None
        elif budget is not None:
            decision = self._budget(req, decision, states, price_uusd or {}, now_s, budget, sku_memory_gb)
        else:
            decision["budget"] = None
        decision["tiers_considered"] = [t.value for t in TIER_ORDER]
        return decision

    @staticmethod
    def _budget(
        req: ChainPlacementRequest,
        decision: dict[str, Any],
        states: Sequence[PoolHeadroom],
        price_uusd: Mapping[str, int],
        now_s: int,
        gate: BudgetGate,
        sku_memory_gb: Mapping[str, int] | None = None,
    ) -> dict[str, Any]:
        """Price the placement and each declared degrade option that is placed, ask the gate, apply its answer."""

        def priced(name: str, d: dict[str, Any]) -> PricedOption:
            pool = d["pool"] if d["action"] != "queue" else None
            price = 0 if pool is None else price_uusd.get(pool, 0)
            return PricedOption(name, price, int(d["gpus"]), pool, tuple(d["victims"]))

        alternatives: dict[str, tuple[dict[str, Any], DegradeOption]] = {}
        for i, o in enumerate(req.degrade_options):
            sub = replace(
                req,
                sku_id=o.sku_id or req.sku_id,
                gpus=o.gpus_per_replica or req.gpus,
                # the chain's size for the option (place/degrade.py _need): a replica floor never raises the count
                replicas=req.replicas if o.min_replicas is None else min(req.replicas, o.min_replicas),
                degrade_options=(),
                running=(),
            )
            d = place(sub, states, now_s=now_s, sku_memory_gb=sku_memory_gb)
            if d["action"] == "place":
                alternatives[f"degrade_options[{i}]"] = (d, o)
        outcome = gate(
            priced("requested", decision),
            [priced(name, d) for name, (d, _) in alternatives.items()],
            {"pool": decision["pool"], "gpus": decision["gpus"], "sku": decision["sku"],
             "placement_action": decision["action"], "victims": decision["victims"], "workload_id": req.workload_id},
        )  # fmt: skip
        if outcome is None:
            decision["budget"] = None
            return decision
        if outcome.action is AdmissionAction.DEGRADE and outcome.option in alternatives:
            d, o = alternatives[outcome.option]
            missed = "_deadline_missed" if d["reason"].endswith("_deadline_missed") else ""
            # what was passed over: the request's pools, its own placement (over budget), then the option's pools
            refused = {"pool": decision["pool"], "region": decision["region"], "tier": decision["tier"],
                       "trigger": "over_budget", "option": None}  # fmt: skip
            ahead = [step for step in decision["skipped"] if step["option"] is None]
            tried = [{**step, "option": outcome.option} for step in d["skipped"]]
            decision = {
                **d,
                "action": "degrade",
                "reason": f"over_budget_degraded{missed}",
                "skipped": [*ahead, *([refused] if decision["pool"] is not None else []), *tried],
                "degrade": {"gpus": o.gpus_per_replica, "sku": o.sku_id, "min_replicas": o.min_replicas},
            }
        elif outcome.action is AdmissionAction.QUEUE:
            retry_at_s = outcome.body["retry_at_s"]
            # a retry at the window's end that cannot finish by the deadline is no promise: say it will miss
            late = (
                req.deadline_s is not None
                and retry_at_s is not None
                and retry_at_s + req.expected_run_s > req.deadline_s
            )
            decision = _queued(decision, "over_budget_deadline_missed" if late else "over_budget_queued", retry_at_s)
        decision["budget"] = outcome.body
        return decision
