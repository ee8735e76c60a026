"""``control/costing.py`` ``rightsize`` reads one sample per bucket (numpy) exactly as the per-record loop it replaced
did: busy GPUs added up over the bucket's measured records, GPU memory the largest of its records holding GPUs and
NaN when one of them lacks it."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.control.costing import SKU_CANDIDATES, rightsize
from gpufleet.cost.books import UtilRec
from gpufleet.cost.rightsizing import Recommendation, ResourceSpec, RightsizingPolicy, UsageProfile, recommend

SPEC = ResourceSpec(cpu=32, mem_gb=256, gpus=4, sku_id="h100_80gb")


def _loop(spec: ResourceSpec, recs: Sequence[UtilRec]) -> Recommendation:
    """The per-record loop ``rightsize`` used before (the reference)."""
    busy: dict[int, float] = {}
    gmem: dict[int, float] = {}
    for r in sorted(recs, key=lambda r: r.start_s):
        b = busy.setdefault(r.start_s, math.nan)
        if not math.isnan(r.util):
            busy[r.start_s] = r.util * r.gpus if math.isnan(b) else b + r.util * r.gpus
        if r.gpus > 0:
            m = gmem.get(r.start_s, r.gpu_mem_gb)
            gmem[r.start_s] = math.nan if math.isnan(m) or math.isnan(r.gpu_mem_gb) else max(m, r.gpu_mem_gb)
    util = np.array([b / max(spec.gpus, 1) for b in busy.values()], dtype=np.float64)
    mem = np.array([gmem.get(t, math.nan) for t in busy], dtype=np.float64)
    nan = np.full(len(util), np.nan)
    cands = tuple(s for s in SKU_CANDIDATES if s != spec.sku_id)
    return recommend("w", spec, UsageProfile(nan, nan, np.clip(util, 0, 1), mem), candidate_skus=cands)


NAN = st.just(math.nan)
REC = st.tuples(
    st.integers(0, 400),  # bucket
    st.sampled_from([0.0, 1.0, 2.0, 4.0]),
    st.one_of(NAN, st.floats(0.0, 1.0)),
    st.one_of(NAN, st.floats(1.0, 300.0)),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(REC, min_size=1, max_size=600), st.booleans())
def test_rightsize_reads_the_buckets_as_the_loop_did(rows: list[tuple[int, float, float, float]], dense: bool) -> None:
    recs = [UtilRec("w", "t", "h100_80gb", 300 * b, 300, g, u, None, m) for b, g, u, m in rows]
    if dense:  # enough buckets for a recommendation, not only "insufficient_samples"
        n = RightsizingPolicy().min_samples
        recs += [UtilRec("w", "t", "h100_80gb", 300 * (500 + i), 300, 4.0, 0.2, None, 50.0) for i in range(n)]
    got, want = rightsize("w", SPEC, recs), _loop(SPEC, recs)
    assert got is not None
    assert (got.recommended, got.reasons) == (want.recommended, want.reasons)
    assert got.evidence.keys() == want.evidence.keys()
    for k, v in got.evidence.items():
        assert (math.isnan(v) and math.isnan(want.evidence[k])) or v == want.evidence[k], k


def test_no_record_measured_is_no_sample_not_an_error() -> None:
    recs = [UtilRec("w", "t", "h100_80gb", 300 * i, 300, 4.0, math.nan) for i in range(400)]
    rec = rightsize("w", SPEC, recs)
    assert rec is not None and rec.reasons == ("insufficient_samples",) and rec.evidence["samples"] == 0.0
