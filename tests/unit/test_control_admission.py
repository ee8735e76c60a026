"""The admission pipeline (control/admission.py): quota -> place -> budget, each stage's refusal with its reason."""

from __future__ import annotations

import math
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import numpy as np
import pytest

from gpufleet.control.admission import (
    AdmissionAction,
    AdmissionOutcome,
    AdmissionPipeline,
    ChainPlacementRequest,
    PoolHeadroom,
    PricedOption,
    decide_budget,
    place,
    team_budget,
)
from gpufleet.control.loop import ControlLoop
from gpufleet.control.procurement import TierLimits
from gpufleet.control.proposing import (
    HeldCommitment,
    choose_plan_region,
    commitment_orders,
    committed_at,
    procurement_context,
    tier_limits,
)
from gpufleet.control.scheduling import QuotaAdmission, TeamQuota
from gpufleet.domain.catalog import default_pools
from gpufleet.domain.errors import ValidationError
from gpufleet.domain.pools import CapacityPool, Tier
from gpufleet.domain.workloads import DegradeOption, Priority, WorkloadKind

NOW_S = 1_767_225_600
SKU = "h100_80gb"


def _pool(pool_id: str, tier: Tier, free: float, price: str = "2") -> PoolHeadroom:
    return PoolHeadroom(CapacityPool(pool_id, "p", "r1", SKU, tier, Decimal(price)), free, 0.5)


POOLS = [_pool("od", Tier.ON_DEMAND, math.inf, "4"), _pool("res", Tier.RESERVED, 8, "2")]
PRICES = {"od": 4_000_000, "res": 2_000_000}
REQ = ChainPlacementRequest(WorkloadKind.TRAINING, Priority.NORMAL, SKU, 8, expected_run_s=3600)


def test_without_quota_or_budget_the_pipeline_is_the_placement_decision() -> None:
    got = AdmissionPipeline().decide(REQ, POOLS, now_s=NOW_S)
    want = place(REQ, POOLS, now_s=NOW_S)
    assert got == {**want, "budget": None, "tiers_considered": got["tiers_considered"]}
    assert got["pool"] == "res" and got["action"] == "place"


def test_a_team_over_its_quota_queues_before_placement_and_the_budget_is_not_asked() -> None:
    asked: list[Any] = []

    def gate(p: PricedOption, d: Sequence[PricedOption], ctx: dict[str, Any]) -> AdmissionOutcome | None:
        asked.append(p)
        return None

    quota = QuotaAdmission([TeamQuota("team-a", "c", SKU, nominal_gpus=4, borrowing_limit_gpus=0)])
    pipe = AdmissionPipeline(quota)
    got = pipe.decide(REQ, POOLS, now_s=NOW_S, team="team-a", price_uusd=PRICES, budget=gate)
    assert got["action"] == "queue" and got["reason"].startswith("quota_") and got["pool"] is None
    assert asked == []
    refused = pipe.check_quota("team-a", SKU, 8)
    assert refused == quota.check("team-a", SKU, 8) and refused is not None and refused.decision == "reject"
    assert AdmissionPipeline().check_quota("team-a", SKU, 8) is None
    within = pipe.decide(REQ, POOLS, now_s=NOW_S, team="team-b", price_uusd=PRICES, budget=gate)  # no quota entry
    assert (
        within["action"] == "place" and len(asked) == 1 and asked[0] == PricedOption("requested", 2_000_000, 8, "res")
    )


def test_over_budget_degrades_to_a_placed_option_that_fits_or_queues_until_the_window_resets() -> None:
    budget = team_budget("team-a", limit_cents=100, period="day", alert_at=(0.5,), enforce=True, now_s=NOW_S)
    req = ChainPlacementRequest(WorkloadKind.TRAINING, Priority.NORMAL, SKU, 8, expected_run_s=3600,
                                degrade_options=(DegradeOption(gpus_per_replica=1),))  # fmt: skip

    def gate(p: PricedOption, d: Sequence[PricedOption], ctx: dict[str, Any]) -> AdmissionOutcome | None:
        call = decide_budget(budget, 0, p, d, expected_run_s=3600, workload_id="w", now_s=NOW_S)
        return AdmissionOutcome(call.decision.action, call.decision.option, {"retry_at_s": call.decision.retry_at_s})

    # 8 GPUs x $2 x 1 h = $16 > $1; 1 GPU x $2 = $2 > $1 too: queued until the day ends
    got = AdmissionPipeline().decide(req, POOLS, now_s=NOW_S, price_uusd=PRICES, budget=gate)
    assert got["action"] == "queue" and got["reason"] == "over_budget_queued"
    assert got["expected_start_s"] == budget.window_end_s
    roomy = team_budget("team-a", limit_cents=500, period="day", alert_at=(0.5,), enforce=True, now_s=NOW_S)
    call = decide_budget(roomy, 0, PricedOption("requested", 2_000_000, 8, "res"),
                         [PricedOption("degrade_options[0]", 2_000_000, 1, "res")], expected_run_s=3600,
                         workload_id="w", now_s=NOW_S)  # fmt: skip
    assert call.decision.action is AdmissionAction.DEGRADE and call.chosen is not None and call.chosen.gpus == 1
    assert call.admitted_units == 2_000_000 * 1 * 3600 and call.request_units == 8 * call.admitted_units


def test_the_plan_region_is_where_the_sku_ran_among_regions_with_a_reserved_pool() -> None:
    assert choose_plan_region({"eu": 5.0, "us": 9.0, "ap": 99.0}, ["us", "eu"]) == ("us", "most_used_region")
    assert choose_plan_region({}, ["us", "eu"]) == ("eu", "first_reserved_region")
    assert choose_plan_region({}, ["us", "eu"], {"us": 40, "ap": 99}) == ("us", "held_region")
    assert choose_plan_region({"eu": 1.0}, ["us", "eu"], {"us": 40}) == ("eu", "most_used_region")
    assert choose_plan_region({"us": 1.0}, []) == (None, "no_reserved_pool")
    assert HeldCommitment("r", 1, 0, 10, "active").end_s == 10


def test_the_loops_commitments_from_a_world_context_net_held_units_and_key_each_order_once() -> None:
    """control.proposing around the loop's procurer: the context counts what is held or on order at lead time
    (as the simulator's desk does), the tier limits come from pool quotas where known, and the orders' keys are
    deterministic."""
    reserved = default_pools(SKU)[0]
    lead = reserved.lead_time_s
    held = [HeldCommitment("a", 8, NOW_S - 100, NOW_S + lead + 1, "active"),  # still held at lead time
            HeldCommitment("b", 8, NOW_S - 100, NOW_S + lead, "active"),  # ends at lead time: not counted
            HeldCommitment("c", 16, NOW_S + lead, NOW_S + 10 * lead, "pending_approval")]  # fmt: skip
    assert committed_at(held, NOW_S + lead) == 24
    assert tier_limits([("spot", 40), ("spot", None), ("secondary", 16), ("on_demand", 99)]) == TierLimits(40, 16)
    assert tier_limits([("spot", None)]) == TierLimits()  # an unknown quota promises nothing
    hist = np.full(28 * 24, 24.0)
    procurer = ControlLoop.gpufleet(0).procurer
    ctx = procurement_context(now_s=NOW_S, sku_id=SKU, pool=reserved, hourly_gpus=hist, forecast=None, held=[],
                              gpus_per_node=8)  # fmt: skip
    (p,) = procurer.propose(ctx)
    assert p.units == 24 and p.start_s == NOW_S + lead  # 24 GPUs around the clock: three nodes
    ctx_held = procurement_context(now_s=NOW_S, sku_id=SKU, pool=reserved, hourly_gpus=hist, forecast=None,
                                   held=held, gpus_per_node=8)  # fmt: skip
    assert ctx_held.committed_gpus_at_lead == 24 and procurer.propose(ctx_held) == []  # held: nothing bought again
    (o,) = commitment_orders([p], region_id="us-east-1")
    assert o.proposal == p and o.idempotency_key == commitment_orders([p], region_id="us-east-1")[0].idempotency_key
    assert o.idempotency_key != commitment_orders([p], region_id="us-west-2")[0].idempotency_key
    with pytest.raises(ValidationError) as err:
        procurement_context(now_s=NOW_S, sku_id=SKU, pool=default_pools(SKU)[1], hourly_gpus=hist, forecast=None,
                            held=[], gpus_per_node=8)  # fmt: skip
    assert err.value.field == "pool"
