"""Rightsizing recommends GPU counts per replica that a tensor-parallel serving engine can shard a model over."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.cost.rightsizing import ResourceSpec, RightsizingPolicy, UsageProfile, recommend
from gpufleet.domain.errors import ValidationError

N = 2016  # a week of 5-minute samples
POW2 = {1, 2, 4, 8}


def _profile(util: float, gmem: float, seed: int = 1) -> UsageProfile:
    jitter = np.random.default_rng(seed).uniform(0.9, 1.0, N)
    nan = np.full(N, np.nan)
    return UsageProfile(nan, nan, util * jitter, gmem * jitter)


def test_a_count_a_model_cannot_be_sharded_over_is_rounded_up_to_the_next_allowed_one() -> None:
    """Review (fixed), the defect: ``recommend`` sized a replica to any whole number of GPUs (8 x H100 at 30 % busy
    -> 3 x H100), but a serving replica shards its model by tensor parallelism, whose degree must divide the model's
    attention heads (vLLM refuses ``tensor_parallel_size`` 3 for 32 heads): applied, the change does not start. The
    count is now rounded up to an allowed one (default 1, 2, 4, 8), reason ``gpu_count_rounded_up_for_parallelism``,
    evidence ``gpus_needed``."""
    cur = ResourceSpec(cpu=64, mem_gb=512, gpus=8, sku_id="h100_80gb")
    rec = recommend("serve-8", cur, _profile(0.30, 200.0))  # 0.3 * 8 * 1.2 = 2.88 H100-eq -> 3 GPUs needed
    assert rec.recommended == ResourceSpec(cpu=64, mem_gb=512, gpus=4, sku_id="h100_80gb")
    assert "gpu_count_reduced" in rec.reasons and "gpu_count_rounded_up_for_parallelism" in rec.reasons
    assert rec.evidence["gpus_needed"] == 3.0


def test_a_sku_move_to_a_count_that_cannot_shard_the_model_is_not_made() -> None:
    """Review (fixed), the defect: a SKU move was priced at a count no replica can run (8 x H100 -> 5 x H200); priced
    at the allowed count (8 x H200) it is dearer than staying, so no move is recommended."""
    cur = ResourceSpec(cpu=64, mem_gb=512, gpus=8, sku_id="h100_80gb")
    # GPU memory unmeasured: the 640 GB kept needs 5 x H200 (705 GB), 8 once rounded, dearer than 8 x H100
    rec = recommend("serve-70b", cur, _profile(0.10, np.nan), candidate_skus=("h200_141gb",))
    assert rec.recommended.gpus in POW2 and rec.recommended == cur


def test_the_current_count_and_a_policys_counts_stay_allowed() -> None:
    """Review (fixed): the replica's current count stays allowed (it runs sharded that way), and a policy can allow
    other counts (``RightsizingPolicy.gpus_per_replica``, checked: positive whole counts)."""
    six = ResourceSpec(cpu=64, mem_gb=512, gpus=6, sku_id="h100_80gb")  # a model of 48 heads runs at TP 6
    rec = recommend("serve-6", six, _profile(0.90, 200.0))  # needs 7: rightsizing never adds GPUs of its SKU
    assert rec.recommended.gpus == 6
    rec = recommend("serve-6", six, _profile(0.60, 200.0))  # needs 4.3 -> 5: the current 6 is allowed
    assert rec.recommended.gpus == 6 and "gpu_count_rounded_up_for_parallelism" in rec.reasons
    cur = ResourceSpec(cpu=64, mem_gb=512, gpus=8, sku_id="h100_80gb")
    anyn = RightsizingPolicy(gpus_per_replica=(1, 2, 3, 4, 5, 6, 7, 8))  # e.g. data-parallel training: any count
    assert recommend("train", cur, _profile(0.30, 200.0), policy=anyn).recommended.gpus == 3
    with pytest.raises(ValidationError, match="gpus_per_replica"):
        RightsizingPolicy(gpus_per_replica=(0, 2))
    with pytest.raises(ValidationError, match="gpus_per_replica"):
        RightsizingPolicy(gpus_per_replica=())


@settings(max_examples=80, deadline=None)
@given(
    st.sampled_from([1, 2, 4, 8]),
    st.sampled_from(["h100_80gb", "h200_141gb", "a100_80gb", "l40s"]),
    st.floats(0.01, 1.0),
    st.one_of(st.just(float("nan")), st.floats(1.0, 900.0)),
)
def test_every_recommended_count_is_a_power_of_two_or_the_current_one(
    gpus: int, sku: str, util: float, gmem: float
) -> None:
    """Review (fixed), the defect: any SKU and count came out (3, 5, 6 or 7 GPUs); now only allowed counts."""
    cur = ResourceSpec(cpu=32, mem_gb=256, gpus=gpus, sku_id=sku)
    cands = ("h100_80gb", "h200_141gb", "a100_80gb", "l40s", "l4", "b200")
    rec = recommend("w", cur, _profile(util, gmem), candidate_skus=cands)
    assert rec.recommended.gpus in POW2 | {gpus}
