"""Rightsizing from percentiles, and a change that is applied and rolled back through one gate."""

from __future__ import annotations

from decimal import Decimal

import numpy as np
import pytest

from gpufleet.cost.changes import ChangeStatus, RightsizingChange, apply_change, rollback_change
from gpufleet.cost.rightsizing import ResourceSpec, UsageProfile, recommend
from gpufleet.domain.errors import ConflictError, InvalidTransition
from gpufleet.domain.reservations import StatusChange

N = 2016  # a week of 5-minute samples


def _profile(cpu: float, mem: float, util: float, gmem: float, seed: int = 1) -> UsageProfile:
    rng = np.random.default_rng(seed)
    jitter = rng.uniform(0.9, 1.0, N)
    return UsageProfile(cpu * jitter, mem * jitter, util * jitter, gmem * jitter)


def test_underused_serving_moves_to_a_cheaper_sku_that_fits_memory_and_throughput() -> None:
    cur = ResourceSpec(cpu=32, mem_gb=256, gpus=2, sku_id="h100_80gb")
    # 2 H100 at <=10 % busy = 0.2 H100-eq, 0.24 with headroom; 30 GB of weights+cache -> 36 GB with headroom.
    rec = recommend("serve-1", cur, _profile(6.0, 40.0, 0.10, 30.0), replicas=4,
                    candidate_skus=("a100_80gb", "l40s", "l4"))  # fmt: skip
    # l4: 0.24/0.12 = 2 GPUs, 36/24 -> 2 GPUs, 2 * 1.6688 = 3.3376 $/h per replica: cheapest that fits.
    assert rec.recommended == ResourceSpec(cpu=7.5, mem_gb=48.0, gpus=2, sku_id="l4")
    assert "cheaper_sku_fits_memory_and_throughput" in rec.reasons
    assert rec.current_usd_per_h == Decimal("6.88") * 2 * 4
    assert rec.monthly_saving_usd == ((Decimal("6.88") * 2 - Decimal("1.6688") * 2) * 4 * 730).quantize(Decimal("0.01"))


def test_memory_bound_workload_keeps_a_large_memory_sku() -> None:
    cur = ResourceSpec(cpu=16, mem_gb=128, gpus=1, sku_id="h100_80gb")
    rec = recommend("serve-2", cur, _profile(4.0, 60.0, 0.05, 70.0), candidate_skus=("l40s", "l4"))
    # 70 GB * 1.2 = 84 GB: 2 x L40S (96 GB) = $7.53/h > $6.88/h; 4 x L4 = $6.68/h is under 5 % cheaper -> stay
    assert rec.recommended.sku_id == "h100_80gb" and rec.recommended.gpus == 1


def test_too_few_samples_changes_nothing() -> None:
    cur = ResourceSpec(cpu=16, mem_gb=128, gpus=8, sku_id="h100_80gb")
    short = UsageProfile(np.ones(10), np.ones(10), np.ones(10) * 0.01, np.ones(10))
    rec = recommend("j", cur, short)
    assert not rec.changed and rec.reasons == ("insufficient_samples",)


def test_apply_and_roll_back_a_rightsizing_change() -> None:
    cur = ResourceSpec(cpu=64, mem_gb=512, gpus=8, sku_id="h100_80gb")
    rec = recommend("train-9", cur, _profile(10.0, 100.0, 0.30, 200.0))
    # 0.3 * 8 * 1.2 = 2.88 H100-eq: 3 GPUs needed, 4 allowed (a replica shards over 1, 2, 4 or 8 GPUs)
    assert rec.recommended.gpus == 4 and "gpu_count_reduced" in rec.reasons
    change = RightsizingChange.from_recommendation(rec, "chg-1", "FINOPS-1")
    spec = apply_change(cur, change, at_s=100, actor="control-loop")
    assert spec == rec.recommended and change.status is ChangeStatus.APPLIED
    back = rollback_change(spec, change, at_s=200, actor="alice", reason="latency_regressed")
    assert back == cur and change.status is ChangeStatus.ROLLED_BACK
    assert change.history == [  # the domain's one history entry, over the change's status enum
        StatusChange(100, ChangeStatus.PROPOSED, ChangeStatus.APPLIED, "control-loop", "rightsizing_applied"),
        StatusChange(200, ChangeStatus.APPLIED, ChangeStatus.ROLLED_BACK, "alice", "latency_regressed"),
    ]
    with pytest.raises(InvalidTransition):
        rollback_change(back, change, at_s=300, actor="alice", reason="again")


def test_apply_refuses_a_spec_edited_since_the_proposal() -> None:
    cur = ResourceSpec(cpu=64, mem_gb=512, gpus=8, sku_id="h100_80gb")
    change = RightsizingChange("chg-2", "T-2", "w", cur, ResourceSpec(8, 64, 2, "h100_80gb"), ("gpu_count_reduced",))
    with pytest.raises(ConflictError):
        apply_change(ResourceSpec(64, 512, 4, "h100_80gb"), change, at_s=1, actor="loop")
    assert change.status is ChangeStatus.PROPOSED
