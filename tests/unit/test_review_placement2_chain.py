"""Review (placement2): the degrade chain's queue answers when a deadline cannot be met (place/degrade.py, the
admission pipeline's budget stage in control/admission.py)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from gpufleet.control.admission import (
    AdmissionAction,
    AdmissionOutcome,
    AdmissionPipeline,
    ChainPlacementRequest,
    PoolHeadroom,
    PricedOption,
    decide_budget,
    team_budget,
)
from gpufleet.domain.catalog import default_pools
from gpufleet.domain.pools import CapacityPool, Tier
from gpufleet.domain.workloads import DegradeOption, Priority, ServingScaling, Workload, WorkloadKind
from gpufleet.place.degrade import DegradeRequest, RunningWork, recommend

NOW_S = 1_767_225_600
SKU = "h100_80gb"
POOLS = {p.tier: p for p in default_pools(SKU)}


def _training(deadline_s: int | None) -> Workload:
    return Workload("job", "job", WorkloadKind.TRAINING, "t", "tn", Priority.HIGH, (SKU,), 8, deadline_s=deadline_s)


def test_a_deadline_already_passed_is_missed_not_at_risk() -> None:
    """Review (fixed), the defect: place/degrade.py recommend queues a request whose deadline is already behind it (or that
    cannot finish by it even if it started now) with ``queued_deadline_at_risk``, the same answer as a request the
    queue might still serve in time: an operator cannot tell a lost cause from a tight one. Expected:
    ``queued_deadline_missed`` whatever the queue's estimate (with one, and without one); ``at_risk`` stays for a
    deadline the queue's estimate breaks but starting now would meet."""
    full = (PoolHeadroom(POOLS[Tier.RESERVED], 0, queue_wait_s=3600),)
    passed = recommend(DegradeRequest(_training(NOW_S - 60), NOW_S, full, expected_run_s=600))
    assert (passed.action, passed.reason, passed.expected_start_s) == ("queue", "queued_deadline_missed", NOW_S + 3600)
    no_signal = (PoolHeadroom(POOLS[Tier.RESERVED], 0),)
    blind = recommend(DegradeRequest(_training(NOW_S - 60), NOW_S, no_signal, expected_run_s=600))
    assert (blind.reason, blind.expected_start_s) == ("queued_deadline_missed", None)
    # the deadline is ahead but the run is longer than the time left: missed as well
    too_long = recommend(DegradeRequest(_training(NOW_S + 300), NOW_S, full, expected_run_s=600))
    assert too_long.reason == "queued_deadline_missed"
    # started now it would finish in time; the queue's estimate makes it late: at risk
    risky = recommend(DegradeRequest(_training(NOW_S + 1800), NOW_S, full, expected_run_s=600))
    assert risky.reason == "queued_deadline_at_risk"


def _pool(pool_id: str, tier: Tier, free: float, price: str) -> PoolHeadroom:
    return PoolHeadroom(CapacityPool(pool_id, "p", "r1", SKU, tier, Decimal(price)), free, 0.5)


def test_a_budget_queue_past_the_deadline_says_it_will_miss() -> None:
    """Review (fixed), the defect: control/admission.py AdmissionPipeline._budget queues a request the budget refuses with
    ``over_budget_queued`` and ``expected_start_s`` = the budget window's end whatever its deadline; when the window
    ends after the deadline (or after the deadline less the run) the retry is useless and the answer promises it
    anyway. Expected: ``over_budget_deadline_missed`` (the budget's ``retry_at_s`` is still reported); a deadline the
    retry still meets keeps ``over_budget_queued``."""
    pools = [_pool("od", Tier.ON_DEMAND, math.inf, "4"), _pool("res", Tier.RESERVED, 8, "2")]
    budget = team_budget("team-a", limit_cents=100, period="day", alert_at=(0.5,), enforce=True, now_s=NOW_S)

    def gate(p: PricedOption, d: Sequence[PricedOption], ctx: dict[str, Any]) -> AdmissionOutcome | None:
        call = decide_budget(budget, 0, p, d, expected_run_s=3600, workload_id="w", now_s=NOW_S)
        return AdmissionOutcome(call.decision.action, call.decision.option, {"retry_at_s": call.decision.retry_at_s})

    def ask(deadline_s: int) -> dict[str, Any]:
        req = ChainPlacementRequest(WorkloadKind.TRAINING, Priority.HIGH, SKU, 8, expected_run_s=3600,
                                    deadline_s=deadline_s)  # fmt: skip
        return AdmissionPipeline().decide(req, pools, now_s=NOW_S, price_uusd={"od": 4_000_000, "res": 2_000_000},
                                          budget=gate)  # fmt: skip

    # $16 for the hour > $1: refused until the day ends; the job must finish 6 hours from now
    late = ask(NOW_S + 6 * 3600)
    assert (late["action"], late["reason"]) == ("queue", "over_budget_deadline_missed")
    assert late["budget"]["retry_at_s"] == budget.window_end_s
    assert late["fallback"][-1]["trigger"] == "over_budget_deadline_missed"
    # a deadline the retry still meets (the window's end + the hour's run)
    ok = ask(budget.window_end_s + 3600)
    assert (ok["reason"], ok["expected_start_s"]) == ("over_budget_queued", budget.window_end_s)


def test_a_pool_whose_sku_cannot_hold_a_replica_is_never_chosen() -> None:
    """Review (fixed), the defect: with ``replica_memory_gb`` (the replica's declared need) the chain still took a
    declared degrade SKU whose GPUs cannot hold it. Expected: such pools are skipped (``gpu_memory``) for placing,
    degrading, preempting and in the fallback chain; a SKU of unknown memory is not trusted either."""
    l4 = {p.tier: p for p in default_pools("l4")}
    w = Workload("svc", "svc", WorkloadKind.TRAINING, "t", "tn", Priority.HIGH, (SKU,), 8,
                 degrade_options=(DegradeOption(sku_id="l4"),))  # fmt: skip
    pools = (PoolHeadroom(POOLS[Tier.RESERVED], 0), PoolHeadroom(l4[Tier.ON_DEMAND], math.inf))
    low = (RunningWork("low", POOLS[Tier.RESERVED].id, 8, Priority.LOW, WorkloadKind.TRAINING),)
    mem = {SKU: 80, "l4": 24}
    # 8 x 80 GB = 640 holds 600: the L4 option (192 GB) is passed over, the low-priority job preempted instead
    d = recommend(DegradeRequest(w, NOW_S, pools, running=low, replica_memory_gb=600, sku_memory_gb=mem))
    assert (d.action, d.pool_id, d.victims) == ("preempt", POOLS[Tier.RESERVED].id, ("low",))
    # without the declaration the L4 option is taken, as before
    assert recommend(DegradeRequest(w, NOW_S, pools, running=low)).sku_id == "l4"
    # 700 GB: nothing holds it; no preemption for a pool that cannot hold it either
    d = recommend(DegradeRequest(w, NOW_S, pools, running=low, replica_memory_gb=700, sku_memory_gb=mem))
    assert d.action == "queue" and [(s.trigger, s.option) for s in d.skipped] == [
        ("gpu_memory", None),
        ("gpu_memory", 0),
    ]
    # the fallback chain after a placement lists no pool that cannot hold it; an unknown SKU's memory is not trusted
    roomy = (PoolHeadroom(POOLS[Tier.RESERVED], 64), PoolHeadroom(POOLS[Tier.ON_DEMAND], math.inf))
    d = recommend(DegradeRequest(w, NOW_S, roomy, replica_memory_gb=600, sku_memory_gb=mem))
    assert d.action == "place" and [s.pool_id for s in d.chain] == [POOLS[Tier.ON_DEMAND].id, None]
    d = recommend(DegradeRequest(w, NOW_S, roomy, replica_memory_gb=600, sku_memory_gb={}))
    assert d.action == "queue" and {s.trigger for s in d.skipped} == {"gpu_memory"}


def test_an_over_budget_degrade_is_never_larger_than_the_chains_degrade_of_the_same_option() -> None:
    """Review (fixed), the defect: control/admission.py AdmissionPipeline._budget places each degrade option with
    ``replicas = o.min_replicas or req.replicas``, while the chain (place/degrade.py ``_need``) takes
    ``min(replicas, o.min_replicas)``: an option ``{gpus: 1, min_replicas: 4}`` of a 2-replica request is 2 GPUs
    for the chain but 4 for the budget stage, so an over-budget "degrade" books and answers twice the GPUs the
    request asked replicas for. Expected: the budget stage prices and answers the chain's size (2 GPUs)."""
    pools = [_pool("od", Tier.ON_DEMAND, math.inf, "4")]
    asked: list[PricedOption] = []

    def gate(p: PricedOption, d: Sequence[PricedOption], ctx: dict[str, Any]) -> AdmissionOutcome | None:
        asked.extend(d)
        return AdmissionOutcome(AdmissionAction.DEGRADE, "degrade_options[0]", {"retry_at_s": None})

    req = ChainPlacementRequest(WorkloadKind.SERVING, Priority.CRITICAL, SKU, 8, replicas=2,
                                degrade_options=(DegradeOption(gpus_per_replica=1, min_replicas=4),))  # fmt: skip
    got = AdmissionPipeline().decide(req, pools, now_s=NOW_S, price_uusd={"od": 4_000_000}, budget=gate)
    chain = recommend(DegradeRequest(
        Workload("w", "w", WorkloadKind.SERVING, "-", "-", Priority.CRITICAL, (SKU,), 1,
                 scaling=ServingScaling(2, 2, 1.0)), NOW_S, tuple(pools), replicas=None)).gpus  # fmt: skip
    assert chain == 2
    assert [o.gpus for o in asked] == [2]
    assert (got["action"], got["gpus"]) == ("degrade", 2)
